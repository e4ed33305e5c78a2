"""A LangGraph agent on `ChatAnthropic`, hand-built as in the LangGraph docs: a `StateGraph` of
messages, a model node with the tools bound, a `ToolNode` of plain functions, `tools_condition`
between them. `refund_order` acts on the world (it appends to the file named by TOOL_LOG).
"""

import json
import os

from langchain_anthropic import ChatAnthropic
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition


def lookup_order(order_id: str) -> str:
    """Look up an order's status."""
    return json.dumps({"order_id": order_id, "status": "delivered", "amount": 59.0})


def refund_order(order_id: str, amount: float) -> str:
    """Refund an order."""
    with open(os.environ["TOOL_LOG"], "a") as log:
        log.write(json.dumps({"tool": "refund_order", "order_id": order_id}) + "\n")
    return f"Refunded {amount} for {order_id}."


tools = [lookup_order, refund_order]
model = ChatAnthropic(model="claude-sonnet-4-5", max_tokens=1024).bind_tools(tools)


def call_model(state: MessagesState) -> dict:
    return {"messages": [model.invoke(state["messages"])]}


builder = StateGraph(MessagesState)
builder.add_node("agent", call_model)
builder.add_node("tools", ToolNode(tools))
builder.add_edge(START, "agent")
builder.add_conditional_edges("agent", tools_condition)
builder.add_edge("tools", "agent")
graph = builder.compile()

result = graph.invoke(
    {"messages": [{"role": "user", "content": "Order A-19 arrived broken, please refund it."}]}
)
for message in result["messages"]:
    message.pretty_print()
