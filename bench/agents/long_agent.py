"""A long-running agent for the replay benchmark: N steps, alternating an LLM call and a tool call.

Prints its own wall time (JSON) on the last line, so the benchmark can set the process's
start-up apart from the agent's work.
"""

from __future__ import annotations

import argparse
import json
import time

import openai

import agentreplay_otel


@agentreplay_otel.tool
def lookup(order: int) -> dict:
    return {"order": order, "status": "shipped", "eta_days": order % 5 + 1}


def main(steps: int) -> None:
    started = time.perf_counter()
    client = openai.OpenAI(api_key="bench", max_retries=0)
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
    main(parser.parse_args().steps)
