"""Streaming the Responses API, as in the openai README: `stream=True` events, then the
`responses.stream()` helper and its final response.
"""

from openai import OpenAI

client = OpenAI()

stream = client.responses.create(
    model="gpt-4o",
    input="Write a one-sentence bedtime story about a unicorn.",
    stream=True,
)
for event in stream:
    if event.type == "response.output_text.delta":
        print(event.delta, end="")
    elif event.type == "response.completed":
        print(f"\n[{event.response.status}, {event.response.usage.output_tokens} tokens]")

with client.responses.stream(
    model="gpt-4o",
    instructions="Answer in one word.",
    input="What colour is the sky?",
) as stream:
    for event in stream:
        if event.type == "response.output_text.delta":
            print(event.delta, end="")
    print()
    final = stream.get_final_response()
print(final.output_text)
