"""Structured outputs with `messages.parse` and a Pydantic model, as in Anthropic's guide."""

import anthropic
from pydantic import BaseModel


class ContactInfo(BaseModel):
    name: str
    email: str
    plan_interest: str


client = anthropic.Anthropic()
response = client.messages.parse(
    model="claude-sonnet-4-5",
    max_tokens=1024,
    messages=[
        {
            "role": "user",
            "content": "Extract the contact: John Smith (john@example.com) wants the Enterprise plan.",
        }
    ],
    output_format=ContactInfo,
)
print(response.parsed_output)
