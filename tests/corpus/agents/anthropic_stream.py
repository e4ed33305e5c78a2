"""The `messages.stream()` helper, as in the anthropic README: text as it arrives, then the final
message it accumulated.
"""

import anthropic

client = anthropic.Anthropic()

with client.messages.stream(
    max_tokens=1024,
    messages=[{"role": "user", "content": "Say hello there!"}],
    model="claude-sonnet-4-5",
) as stream:
    for text in stream.text_stream:
        print(text, end="", flush=True)
    print()

message = stream.get_final_message()
print(message.stop_reason, message.usage.input_tokens, message.usage.output_tokens)
