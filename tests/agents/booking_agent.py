"""A small agent with no AgentReplay code but its tool decorator: run under opentelemetry-instrument.

It asks the model (OpenAI chat, then a streamed call, then Anthropic) and books through a tool.
Endpoints come from the usual client variables (OPENAI_BASE_URL, ANTHROPIC_BASE_URL).
"""

import json

import anthropic
import openai

import agentreplay_otel


@agentreplay_otel.tool(side_effect=True, cost=lambda flight, day: 129.0)
def book_flight(flight: str, day: str) -> dict:
    return {"flight": flight, "day": day, "confirmation": "ABC123"}


def main() -> None:
    oai = openai.OpenAI(api_key="test", max_retries=0)
    first = oai.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "Book me the Friday flight to Lisbon"}],
    )
    call = first.choices[0].message.tool_calls[0]
    booking = book_flight(**json.loads(call.function.arguments))
    stream = oai.chat.completions.create(
        model="gpt-4o-mini",
        stream=True,
        stream_options={"include_usage": True},
        messages=[{"role": "user", "content": f"Confirm booking {booking['confirmation']}"}],
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    claude = anthropic.Anthropic(api_key="test", max_retries=0)
    summary = claude.messages.create(
        model="claude-sonnet-4-5", max_tokens=200, messages=[{"role": "user", "content": text}]
    )
    print(summary.content[0].text)


if __name__ == "__main__":
    main()
