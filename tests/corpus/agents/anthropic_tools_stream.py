"""Streaming tool use: the tool's input arrives as `input_json` events while it streams, the final
message goes back as the assistant turn, the tool result is answered in a second stream.

`create_event` acts on the world (it appends to the file named by TOOL_LOG); `@agentreplay_otel.tool`
records it and sandboxes it in replay.
"""

import json
import os

import anthropic

import agentreplay_otel


@agentreplay_otel.tool(side_effect=True)
def create_event(title: str, day: str) -> dict:
    with open(os.environ["TOOL_LOG"], "a") as log:
        log.write(json.dumps({"tool": "create_event", "title": title}) + "\n")
    return {"event": "E-3", "title": title, "day": day}


tools = [
    {
        "name": "create_event",
        "description": "Put an event in the user's calendar.",
        "input_schema": {
            "type": "object",
            "properties": {"title": {"type": "string"}, "day": {"type": "string"}},
            "required": ["title", "day"],
        },
    }
]

client = anthropic.Anthropic()
messages = [{"role": "user", "content": "Put the team lunch in my calendar for Thursday."}]

with client.messages.stream(
    model="claude-sonnet-4-5", max_tokens=1024, tools=tools, messages=messages
) as stream:
    for event in stream:
        if event.type == "input_json":
            print(f"input so far: {event.snapshot}")
    message = stream.get_final_message()

messages.append({"role": "assistant", "content": message.content})
tool_use = next(block for block in message.content if block.type == "tool_use")
result = create_event(**tool_use.input)
messages.append(
    {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": tool_use.id, "content": json.dumps(result)}],
    }
)

with client.messages.stream(
    model="claude-sonnet-4-5", max_tokens=1024, tools=tools, messages=messages
) as stream:
    for text in stream.text_stream:
        print(text, end="")
    print()
