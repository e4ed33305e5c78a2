"""The Responses API with function calling, as in OpenAI's function calling guide: the model's output
items go back into the input list, each function call is answered with a `function_call_output`.

`open_ticket` acts on the world (it appends to the file named by TOOL_LOG); `@agentreplay_otel.tool`
records it and sandboxes it in replay.
"""

import json
import os

from openai import OpenAI

import agentreplay_otel

INSTRUCTIONS = os.environ.get("AGENT_INSTRUCTIONS", "Tell the customer their ticket number.")
client = OpenAI()

tools = [
    {
        "type": "function",
        "name": "open_ticket",
        "description": "Open a support ticket for a customer.",
        "parameters": {
            "type": "object",
            "properties": {"customer": {"type": "string"}, "summary": {"type": "string"}},
            "required": ["customer", "summary"],
            "additionalProperties": False,
        },
        "strict": True,
    }
]


@agentreplay_otel.tool(side_effect=True)
def open_ticket(customer: str, summary: str) -> dict:
    with open(os.environ["TOOL_LOG"], "a") as log:
        log.write(json.dumps({"tool": "open_ticket", "customer": customer}) + "\n")
    return {"ticket": "T-1042", "customer": customer, "status": "open"}


input_list = [
    {"role": "user", "content": "My router keeps rebooting. I am customer C-88, please open a ticket."}
]
response = client.responses.create(model="gpt-4.1", tools=tools, input=input_list)

input_list += response.output
for item in response.output:
    if item.type == "function_call":
        result = open_ticket(**json.loads(item.arguments))
        print(f"{item.name} -> {result}")
        input_list.append(
            {"type": "function_call_output", "call_id": item.call_id, "output": json.dumps(result)}
        )

response = client.responses.create(
    model="gpt-4.1",
    instructions=INSTRUCTIONS,
    tools=tools,
    input=input_list,
)
print(response.output_text)
