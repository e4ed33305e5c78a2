"""A LangGraph ReAct agent on `ChatOpenAI`, as in the LangGraph quickstart: `create_react_agent`
with LangChain `@tool` functions. `book_table` acts on the world (it appends to the file named by
TOOL_LOG).
"""

import json
import os

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent


@tool
def find_restaurant(cuisine: str) -> str:
    """Find a restaurant serving this cuisine."""
    return {"thai": "Bangkok Garden", "italian": "Trattoria Roma"}.get(cuisine.lower(), "none found")


@tool
def book_table(restaurant: str, people: int) -> str:
    """Book a table at a restaurant."""
    with open(os.environ["TOOL_LOG"], "a") as log:
        log.write(json.dumps({"tool": "book_table", "restaurant": restaurant}) + "\n")
    return f"Booked a table for {people} at {restaurant}, confirmation R-55."


model = ChatOpenAI(model="gpt-4o-mini", temperature=0)
agent = create_react_agent(
    model,
    tools=[find_restaurant, book_table],
    prompt=os.environ.get("AGENT_INSTRUCTIONS", "You are a helpful dining assistant."),
)
result = agent.invoke({"messages": [{"role": "user", "content": "Book a Thai place for 4 people tonight."}]})
for message in result["messages"]:
    message.pretty_print()
