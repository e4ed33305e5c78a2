"""Anthropic tool use, as in Anthropic's tool use guide: the assistant turn goes back as the SDK
returned it (`{"role": "assistant", "content": response.content}`), each `tool_use` block is
answered with a `tool_result`, until the model stops asking.

`place_order` acts on the world (it appends to the file named by TOOL_LOG); `@agentreplay_otel.tool`
records it and sandboxes it in replay.
"""

import json
import os

import anthropic

import agentreplay_otel

SYSTEM = os.environ.get("AGENT_INSTRUCTIONS", "You are a careful trading assistant.")
PRICES = {"ACME": 41.5, "INITECH": 12.25}


@agentreplay_otel.tool
def get_stock_price(ticker: str) -> float:
    return PRICES[ticker]


@agentreplay_otel.tool(side_effect=True)
def place_order(ticker: str, quantity: int) -> dict:
    with open(os.environ["TOOL_LOG"], "a") as log:
        log.write(json.dumps({"tool": "place_order", "ticker": ticker, "quantity": quantity}) + "\n")
    return {"order": "O-7", "ticker": ticker, "quantity": quantity, "status": "filled"}


TOOLS = {"get_stock_price": get_stock_price, "place_order": place_order}
tools = [
    {
        "name": "get_stock_price",
        "description": "The latest price of a stock, in USD.",
        "input_schema": {
            "type": "object",
            "properties": {"ticker": {"type": "string"}},
            "required": ["ticker"],
        },
    },
    {
        "name": "place_order",
        "description": "Buy shares of a stock.",
        "input_schema": {
            "type": "object",
            "properties": {"ticker": {"type": "string"}, "quantity": {"type": "integer"}},
            "required": ["ticker", "quantity"],
        },
    },
]

client = anthropic.Anthropic()
messages = [{"role": "user", "content": "Buy 10 ACME shares if they cost less than 50 dollars."}]
response = client.messages.create(
    model="claude-sonnet-4-5", max_tokens=1024, system=SYSTEM, tools=tools, messages=messages
)
while response.stop_reason == "tool_use":
    messages.append({"role": "assistant", "content": response.content})
    results = []
    for block in response.content:
        if block.type == "tool_use":
            output = TOOLS[block.name](**block.input)
            print(f"{block.name}({block.input}) -> {output}")
            results.append({"type": "tool_result", "tool_use_id": block.id, "content": json.dumps(output)})
    messages.append({"role": "user", "content": results})
    response = client.messages.create(
        model="claude-sonnet-4-5", max_tokens=1024, system=SYSTEM, tools=tools, messages=messages
    )

print(next(block.text for block in response.content if block.type == "text"))
