"""A long-running agent for the replay benchmark: N steps, alternating an LLM call and a tool call.

Prints its own wall time (JSON) on the last line, so the benchmark can set the process's
start-up apart from the agent's work. ``--answer FILE`` answers every call in process with the
response in FILE (no network, no server): the agent's work with its client library alone.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import openai

import agentreplay_otel


@agentreplay_otel.tool
def lookup(order: int) -> dict:
    return {"order": order, "status": "shipped", "eta_days": order % 5 + 1}


def in_process(answer_file: str) -> Any:
    """An HTTP client whose every request gets the response saved in ``answer_file``."""
    import httpx2

    answer = json.loads(Path(answer_file).read_text())
    body = answer["body"].encode("utf-8")
    return httpx2.Client(transport=httpx2.MockTransport(
        lambda request: httpx2.Response(200, headers=answer["headers"], content=body)))


def main(steps: int, answer: str | None) -> None:
    started = time.perf_counter()
    http = in_process(answer) if answer else None
    client = openai.OpenAI(api_key="bench", max_retries=0, http_client=http)
    history = [{"role": "system", "content": "You are a support agent. Check each order the customer lists."}]
    with agentreplay_otel.run("long-agent", input={"steps": steps}):
        for i in range(steps // 2):
            history = history[-6:] + [{"role": "user", "content": f"Where is order {i}?"}]
            reply = client.chat.completions.create(model="gpt-4o-mini", messages=history)
            history.append({"role": "assistant", "content": reply.choices[0].message.content or ""})
            lookup(i)
    print(json.dumps({"agent_s": time.perf_counter() - started}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--answer", help="answer every call in process with this saved response (JSON)")
    args = parser.parse_args()
    main(args.steps, args.answer)
