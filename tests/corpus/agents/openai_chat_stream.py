"""Streaming Chat Completions two ways, as in the openai README and helpers guide: `stream=True`
read chunk by chunk, and the `chat.completions.stream()` helper with its events and final completion.
"""

from openai import OpenAI

client = OpenAI()

stream = client.chat.completions.create(
    model="gpt-4o",
    messages=[{"role": "user", "content": "Say this is a test"}],
    stream=True,
)
for chunk in stream:
    print(chunk.choices[0].delta.content or "", end="")
print()

with client.chat.completions.stream(
    model="gpt-4o",
    messages=[{"role": "user", "content": "Write a haiku about recursion"}],
) as stream:
    for event in stream:
        if event.type == "content.delta":
            print(event.delta, end="", flush=True)
        elif event.type == "content.done":
            print()

completion = stream.get_final_completion()
print(completion.choices[0].finish_reason, len(completion.choices[0].message.content))
