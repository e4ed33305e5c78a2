"""The misbooking scenario: a scripted model that books the cheaper Saturday flight when the
customer asked for Friday, unless its instructions say to keep the customer's day.

Used by the demo and the replay tests. Only the model and the airline are simulated; the
agent (``examples/flight_agent.py``), the client libraries, recording, replay and fork are real.
"""

from __future__ import annotations

import json

from agentreplay_otel.testing.llm_server import LLMServer, Request, ScriptedReply, ToolCallSpec

FIX = "Book the day the customer asked for, even when another day is cheaper."
"""The one-line prompt fix that makes the model book Friday."""


def _tool_results(request: Request) -> list[dict]:
    out = []
    for message in request.body.get("messages", []) or []:
        if isinstance(message, dict) and message.get("role") == "tool":
            try:
                out.append(json.loads(message.get("content") or "null"))
            except ValueError:
                continue
    return out


def airline_model(request: Request) -> ScriptedReply:
    """Search both days, then book: the cheaper day, or the asked-for day when told to keep it."""
    if request.provider == "anthropic":
        return ScriptedReply(text=f"Summary for the customer: {request.last_user_text}")
    if request.stream:
        return ScriptedReply(text="Your booking is confirmed. " + _booked_text(request))
    results = _tool_results(request)
    booking = _booking(request)
    if booking:
        return ScriptedReply(text=f"Booked {booking['flight']} on {booking['day']}.")
    if not results:
        return ScriptedReply(tool_calls=[
            ToolCallSpec("search_flights", {"destination": "Lisbon", "day": "Friday"}),
            ToolCallSpec("search_flights", {"destination": "Lisbon", "day": "Saturday"}),
        ])
    if FIX in request.prompt_text:
        return ScriptedReply(tool_calls=[ToolCallSpec("book_flight", {"flight": "TP123", "day": "Friday"})])
    return ScriptedReply(tool_calls=[ToolCallSpec("book_flight", {"flight": "TP125", "day": "Saturday"})])


def _booking(request: Request) -> dict | None:
    """The arguments of the booking the agent already made in this conversation, if any."""
    for message in request.body.get("messages", []) or []:
        for call in (message.get("tool_calls") or []) if isinstance(message, dict) else []:
            if call.get("function", {}).get("name") == "book_flight":
                try:
                    return json.loads(call["function"].get("arguments") or "{}")
                except ValueError:
                    return {}
    return None


def _booked_text(request: Request) -> str:
    booking = _booking(request)
    return f"Flight {booking.get('flight')} on {booking.get('day')}." if booking else ""


def airline_server() -> LLMServer:
    return LLMServer(airline_model)
