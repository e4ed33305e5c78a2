"""Reading response headers, as in the openai README: `with_raw_response`, a header, then `.parse()`
for the object `create()` would have returned.
"""

from openai import OpenAI

client = OpenAI()
response = client.chat.completions.with_raw_response.create(
    messages=[{"role": "user", "content": "Say this is a test"}],
    model="gpt-4o",
)
print(response.headers.get("x-request-id"))
print(response.headers.get("x-ratelimit-remaining-requests"))

completion = response.parse()  # get the object that `chat.completions.create()` would have returned
print(completion.choices[0].message.content)
