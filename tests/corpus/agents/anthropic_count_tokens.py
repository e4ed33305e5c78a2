"""Counting tokens before sending, as in Anthropic's token counting guide: `messages.count_tokens`,
then the same request sent for real if it fits the budget.
"""

import anthropic

client = anthropic.Anthropic()
system = "You are a scientist."
messages = [{"role": "user", "content": "Hello, Claude. Summarise the theory of relativity in one line."}]

count = client.messages.count_tokens(model="claude-sonnet-4-5", system=system, messages=messages)
print(f"input tokens: {count.input_tokens}")

if count.input_tokens < 1000:
    message = client.messages.create(
        model="claude-sonnet-4-5", max_tokens=200, system=system, messages=messages
    )
    print(message.content[0].text)
