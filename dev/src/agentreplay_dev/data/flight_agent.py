"""A flight-booking agent, written with no AgentReplay code but its tool decorators.

Run it under the launcher and every model call and tool call is recorded:

    OPENAI_BASE_URL=... ANTHROPIC_BASE_URL=... opentelemetry-instrument python examples/flight_agent.py

It asks an OpenAI-compatible model what to do, searches, haggles and books through its tools,
streams a confirmation, and has an Anthropic model summarise for the customer.
``--policy`` replaces the agent's instructions (a new version of the agent).
"""

from __future__ import annotations

import argparse
import json
import os

import anthropic
import openai

import agentreplay_otel

POLICY = "You are a travel agent. Find the customer the best-value flight and book it."
FLIGHTS = {
    "Friday": [{"flight": "TP123", "day": "Friday", "depart": "09:40", "price_eur": 129}],
    "Saturday": [{"flight": "TP125", "day": "Saturday", "depart": "08:15", "price_eur": 99}],
}
FLOOR = 0.9
"""The airline never sells below this fraction of a flight's listed price."""


def listed_price(flight: str, day: str) -> float:
    return float(next((f["price_eur"] for f in FLIGHTS.get(day, []) if f["flight"] == flight), 0))


def fare(flight: str, day: str, price_eur: float | None = None) -> float:
    """What a booking costs: the negotiated price when there is one, else the listed price."""
    return float(price_eur) if price_eur is not None else listed_price(flight, day)


@agentreplay_otel.tool
def search_flights(destination: str, day: str) -> list[dict]:
    """The airline's search (simulated)."""
    return FLIGHTS.get(day, [])


@agentreplay_otel.tool
def negotiate_fare(flight: str, day: str, offer_eur: float) -> dict:
    """The airline's answer to an offer (simulated): accepted at or above its floor, else a counter-offer."""
    floor = round(listed_price(flight, day) * FLOOR)
    if offer_eur >= floor:
        return {"flight": flight, "day": day, "status": "accepted", "price_eur": offer_eur}
    return {"flight": flight, "day": day, "status": "counter-offer", "price_eur": floor}


@agentreplay_otel.tool(side_effect=True, cost=fare, currency="EUR")
def book_flight(flight: str, day: str, price_eur: float | None = None) -> dict:
    """The airline's booking and the payment (simulated): this acts on the world.

    Each booking is written to the airline's ledger (``FLIGHT_LEDGER``, if set), so a test
    can see that a replay or a fork never books anything.
    """
    paid = fare(flight, day, price_eur)
    ledger = os.environ.get("FLIGHT_LEDGER")
    if ledger:
        with open(ledger, "a") as fh:
            fh.write(json.dumps({"flight": flight, "day": day, "price_eur": paid}) + "\n")
    return {"flight": flight, "day": day, "price_eur": paid, "confirmation": f"CONF-{flight}"}


TOOLS = {"search_flights": search_flights, "negotiate_fare": negotiate_fare, "book_flight": book_flight}


def _function(name: str, description: str, **params: str) -> dict:
    """A tool as the model sees it; a parameter whose type ends in ``?`` is optional."""
    properties = {p: {"type": t.rstrip("?")} for p, t in params.items()}
    required = [p for p, t in params.items() if not t.endswith("?")]
    schema = {"type": "object", "properties": properties, "required": required}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": schema}}


TOOL_SPECS = [
    _function("search_flights", "Flights to a destination on a day.", destination="string", day="string"),
    _function("negotiate_fare", "Offer the airline a price for a flight.", flight="string", day="string",
              offer_eur="number"),
    _function("book_flight", "Book and pay for a flight, at a negotiated price if any.", flight="string",
              day="string", price_eur="number?"),
]


def main(request: str, policy: str = POLICY) -> str:
    llm = openai.OpenAI(api_key="demo", max_retries=0)
    messages: list[dict] = [{"role": "system", "content": policy}, {"role": "user", "content": request}]
    for _turn in range(6):
        answer = llm.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=TOOL_SPECS)
        reply = answer.choices[0].message
        if not reply.tool_calls:
            break
        messages.append(reply.model_dump(exclude_unset=True, exclude_none=True))
        for call in reply.tool_calls:
            result = TOOLS[call.function.name](**json.loads(call.function.arguments))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
    stream = llm.chat.completions.create(
        model="gpt-4o-mini", messages=messages, stream=True, stream_options={"include_usage": True}
    )
    confirmation = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    summary = anthropic.Anthropic(api_key="demo", max_retries=0).messages.create(
        model="claude-haiku-4-5", max_tokens=200,
        messages=[{"role": "user", "content": confirmation}],
    )
    return summary.content[0].text


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("request", nargs="*", default=["Book me a flight to Lisbon on Friday."])
    parser.add_argument("--policy", default=POLICY, help="the agent's instructions")
    args = parser.parse_args()
    print(main(" ".join(args.request), args.policy))
