"""Structured outputs with a Pydantic model, as in OpenAI's guide: `chat.completions.parse` with
`response_format` (also as `beta.chat.completions.parse`), and `responses.parse` with `text_format`.
"""

from openai import OpenAI
from pydantic import BaseModel


class CalendarEvent(BaseModel):
    name: str
    date: str
    participants: list[str]


client = OpenAI()

completion = client.chat.completions.parse(
    model="gpt-4o-2024-08-06",
    messages=[
        {"role": "system", "content": "Extract the event information."},
        {"role": "user", "content": "Alice and Bob are going to a science fair on Friday."},
    ],
    response_format=CalendarEvent,
)
event = completion.choices[0].message.parsed
print(event)

# the same helper under its older name, as earlier guides wrote it
completion = client.beta.chat.completions.parse(
    model="gpt-4o-2024-08-06",
    messages=[{"role": "user", "content": "Eve has a dentist appointment on Monday."}],
    response_format=CalendarEvent,
)
print(completion.choices[0].message.parsed)

response = client.responses.parse(
    model="gpt-4o-2024-08-06",
    input=[
        {"role": "system", "content": "Extract the event information."},
        {"role": "user", "content": "Carol is hosting a book club on Tuesday with Dan."},
    ],
    text_format=CalendarEvent,
)
print(response.output_parsed)
