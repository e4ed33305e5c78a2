"""Extended thinking, as in Anthropic's guide: a streamed answer whose thinking arrives as
`thinking_delta` events, then a follow-up turn that passes the thinking block back unchanged.
"""

import anthropic

client = anthropic.Anthropic()
thinking = {"type": "enabled", "budget_tokens": 2000}
messages = [{"role": "user", "content": "Is 1001 a prime number?"}]

with client.messages.stream(
    model="claude-sonnet-4-5", max_tokens=4000, thinking=thinking, messages=messages
) as stream:
    for event in stream:
        if event.type == "content_block_start":
            print(f"[{event.content_block.type}]")
        elif event.type == "content_block_delta":
            if event.delta.type == "thinking_delta":
                print(event.delta.thinking, end="")
            elif event.delta.type == "text_delta":
                print(event.delta.text, end="")
        elif event.type == "content_block_stop":
            print()
    first = stream.get_final_message()

messages += [
    {"role": "assistant", "content": first.content},
    {"role": "user", "content": "And 1009?"},
]
second = client.messages.create(
    model="claude-sonnet-4-5", max_tokens=4000, thinking=thinking, messages=messages
)
for block in second.content:
    if block.type == "thinking":
        print(f"thinking: {block.thinking}")
    elif block.type == "text":
        print(f"answer: {block.text}")
