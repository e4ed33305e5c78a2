"""An agent that asks the model (the real ``openai`` client, at ``OPENAI_BASE_URL``) which flight to book,
books it through a side-effect tool (so the guard asks the collector's Authorize first) and prints its run id.
Where it records, and over what, is the environment's business (OTEL_EXPORTER_OTLP_*, AGENTREPLAY_COLLECTOR)."""

from __future__ import annotations

import json
import os
import sys

import openai

import agentreplay_otel


@agentreplay_otel.tool(side_effect=True)
def book(flight: str) -> str:
    with open(os.environ["LEDGER"], "a") as ledger:
        ledger.write(flight + "\n")
    return f"booked {flight}"


def main() -> int:
    with agentreplay_otel.run("tls_agent") as run:
        client = openai.OpenAI(api_key="test", max_retries=0)
        reply = client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "Book me the Friday flight"}]
        )
        call = reply.choices[0].message.tool_calls[0]
        print(book(**json.loads(call.function.arguments)), flush=True)
        print(f"run {run.run_id}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
