"""Chat Completions function calling, as in OpenAI's guide: the model asks for two tools at once
(parallel tool calls), the program runs them, appends the assistant message and the tool results,
and asks again until the model answers in text.

The tools are recorded and sandboxed in replay through `@agentreplay_otel.tool`; `send_email` acts on
the world (it appends to the file named by TOOL_LOG).
"""

import json
import os

from openai import OpenAI

import agentreplay_otel

INSTRUCTIONS = os.environ.get(
    "AGENT_INSTRUCTIONS", "You are a concise assistant. Use the tools you are given."
)
FORECASTS = {"Paris": "14°C, light rain", "Bogotá": "19°C, cloudy"}

tools = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
                "additionalProperties": False,
            },
            "strict": True,
        },
    },
    {
        "type": "function",
        "function": {
            "name": "send_email",
            "description": "Send an email.",
            "parameters": {
                "type": "object",
                "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
                "required": ["to", "body"],
                "additionalProperties": False,
            },
            "strict": True,
        },
    },
]


@agentreplay_otel.tool
def get_weather(city: str) -> str:
    return FORECASTS.get(city, "unknown")


@agentreplay_otel.tool(side_effect=True)
def send_email(to: str, body: str) -> str:
    with open(os.environ["TOOL_LOG"], "a") as log:
        log.write(json.dumps({"tool": "send_email", "to": to}) + "\n")
    return f"sent to {to}"


TOOLS = {"get_weather": get_weather, "send_email": send_email}

client = OpenAI()
messages = [
    {"role": "system", "content": INSTRUCTIONS},
    {
        "role": "user",
        "content": "What's the weather in Paris and Bogotá? Email both forecasts to ana@example.com.",
    },
]
while True:
    completion = client.chat.completions.create(model="gpt-4.1", messages=messages, tools=tools)
    message = completion.choices[0].message
    if not message.tool_calls:
        break
    messages.append(message)  # the assistant's tool calls go back as the SDK returned them
    for tool_call in message.tool_calls:
        args = json.loads(tool_call.function.arguments)
        result = TOOLS[tool_call.function.name](**args)
        print(f"{tool_call.function.name}({args}) -> {result}")
        messages.append({"role": "tool", "tool_call_id": tool_call.id, "content": str(result)})

print(message.content)
