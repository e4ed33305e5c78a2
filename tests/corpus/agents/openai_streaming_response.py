"""`with_streaming_response`, as in the openai README: the headers before the body is read, then the
body parsed, and a streamed answer read line by line from the raw server-sent events.
"""

import json

from openai import OpenAI

client = OpenAI()

with client.chat.completions.with_streaming_response.create(
    messages=[{"role": "user", "content": "Say this is a test"}],
    model="gpt-4o",
) as response:
    print(response.headers.get("x-request-id"))
    completion = response.parse()
    print(completion.choices[0].message.content)

with client.chat.completions.with_streaming_response.create(
    messages=[{"role": "user", "content": "Count to three"}],
    model="gpt-4o",
    stream=True,
) as response:
    for line in response.iter_lines():
        if line.startswith("data: ") and line != "data: [DONE]":
            chunk = json.loads(line[len("data: ") :])
            print(chunk["choices"][0]["delta"].get("content") or "", end="")
    print()
