"""The legacy Completions API (`completions.create`), still served for instruct models: one
completion, then the same streamed.
"""

from openai import OpenAI

client = OpenAI()

response = client.completions.create(
    model="gpt-3.5-turbo-instruct",
    prompt="Write a tagline for an ice cream shop.",
    max_tokens=30,
)
print(response.choices[0].text.strip())

for chunk in client.completions.create(
    model="gpt-3.5-turbo-instruct",
    prompt="Write a tagline for a bakery.",
    max_tokens=30,
    stream=True,
):
    print(chunk.choices[0].text, end="")
print()
