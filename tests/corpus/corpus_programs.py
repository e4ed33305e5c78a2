"""The corpus: each program of ``agents/`` with the model answers it is recorded against.

A program that does not replay identically yet carries ``xfail``: the cause observed, so the suite
stays green and turns red (strict xfail) the day it is fixed.
"""

from __future__ import annotations

import json

from corpuskit import Program

from agentreplay_dev.llm_server import Request, ScriptedReply, ToolCallSpec


def _json(value: object) -> str:
    return json.dumps(value)


def _translator(request: Request) -> ScriptedReply:
    """Answers by what is asked, so concurrent requests get their own answers in any order."""
    system = str((request.body.get("messages") or [{}])[0].get("content", ""))
    for language, text in (
        ("French", "Bonjour, mes amis"),
        ("German", "Guten Morgen, Freunde"),
        ("Portuguese", "Bom dia, amigos"),
    ):
        if language in system:
            return ScriptedReply(text=text)
    return ScriptedReply(text="Hello, Bonjour, Hola")


PROGRAMS = [
    Program(
        name="openai_tools",
        script=[
            ScriptedReply(
                tool_calls=[
                    ToolCallSpec("get_weather", {"city": "Paris"}),
                    ToolCallSpec("get_weather", {"city": "Bogotá"}),
                ]
            ),
            ScriptedReply(
                tool_calls=[
                    ToolCallSpec(
                        "send_email",
                        {"to": "ana@example.com", "body": "Paris: 14°C, light rain. Bogotá: 19°C, cloudy."},
                    )
                ]
            ),
            ScriptedReply(text="I emailed both forecasts to ana@example.com."),
        ],
        expect="I emailed both forecasts to ana@example.com.",
        side_effects=1,
        changed_prompt=(0, "messages[0].content"),
    ),
    Program(
        name="openai_async",
        script=_translator,
        expect="German: Guten Morgen, Freunde",
    ),
    Program(
        name="openai_chat_stream",
        script=[
            ScriptedReply(text="This is a test."),
            ScriptedReply(text="A function calls itself, until the base case ends the loop."),
        ],
        expect="This is a test.",
    ),
    Program(
        name="openai_responses",
        script=[
            ScriptedReply(
                tool_calls=[
                    ToolCallSpec("open_ticket", {"customer": "C-88", "summary": "Router keeps rebooting"})
                ]
            ),
            ScriptedReply(text="Your ticket is T-1042; we will be in touch."),
        ],
        expect="Your ticket is T-1042; we will be in touch.",
        side_effects=1,
        changed_prompt=(2, "instructions"),
    ),
    Program(
        name="openai_responses_stream",
        script=[
            ScriptedReply(text="A small unicorn counted the stars until she fell asleep."),
            ScriptedReply(text="Blue."),
        ],
        expect="Blue.",
    ),
    Program(
        name="openai_parse",
        script=[
            ScriptedReply(
                text=_json({"name": "Science fair", "date": "Friday", "participants": ["Alice", "Bob"]})
            ),
            ScriptedReply(text=_json({"name": "Dentist", "date": "Monday", "participants": ["Eve"]})),
            ScriptedReply(
                text=_json({"name": "Book club", "date": "Tuesday", "participants": ["Carol", "Dan"]})
            ),
        ],
        expect="name='Book club' date='Tuesday' participants=['Carol', 'Dan']",
    ),
    Program(
        name="openai_raw_response", script=[ScriptedReply(text="This is a test.")], expect="This is a test."
    ),
    Program(
        name="openai_streaming_response",
        script=[ScriptedReply(text="This is a test."), ScriptedReply(text="One, two, three.")],
        expect="One, two, three.",
    ),
    Program(
        name="openai_completions_legacy",
        script=[
            ScriptedReply(text=" Scoops of happiness in every cone."),
            ScriptedReply(text=" Fresh from our oven to your table."),
        ],
        expect="Scoops of happiness in every cone.",
    ),
    Program(name="openai_embeddings", script=None, expect="The cat sat on the mat."),
    Program(name="openai_nondeterminism", script=None, expect="You said: Order "),
    Program(
        name="anthropic_tools",
        script=[
            ScriptedReply(
                text="Let me check the price first.",
                tool_calls=[ToolCallSpec("get_stock_price", {"ticker": "ACME"})],
            ),
            ScriptedReply(tool_calls=[ToolCallSpec("place_order", {"ticker": "ACME", "quantity": 10})]),
            ScriptedReply(text="Bought 10 ACME shares at $41.50."),
        ],
        expect="Bought 10 ACME shares at $41.50.",
        side_effects=1,
    ),
    Program(
        name="anthropic_stream",
        script=[ScriptedReply(text="Hello there! How can I help?")],
        expect="Hello there! How can I help?",
    ),
    Program(
        name="anthropic_tools_stream",
        script=[
            ScriptedReply(
                text="I'll add it.",
                tool_calls=[ToolCallSpec("create_event", {"title": "Team lunch", "day": "Thursday"})],
            ),
            ScriptedReply(text="Done: the team lunch is in your calendar for Thursday."),
        ],
        expect="Done: the team lunch is in your calendar for Thursday.",
        side_effects=1,
    ),
    Program(
        name="anthropic_thinking",
        script=[
            ScriptedReply(thinking="1001 = 7 x 11 x 13.", text="No: 1001 is 7 x 11 x 13."),
            ScriptedReply(thinking="1009 has no prime divisor up to 31.", text="Yes, 1009 is prime."),
        ],
        expect="answer: Yes, 1009 is prime.",
    ),
    Program(
        name="anthropic_parse",
        script=[
            ScriptedReply(
                text=_json({"name": "John Smith", "email": "john@example.com", "plan_interest": "Enterprise"})
            )
        ],
        expect="name='John Smith' email='john@example.com' plan_interest='Enterprise'",
    ),
    Program(
        name="anthropic_count_tokens",
        script=[ScriptedReply(text="Space and time are one, and light's speed is the same for all.")],
        expect="Space and time are one, and light's speed is the same for all.",
    ),
    Program(
        name="langgraph_openai",
        script=[
            ScriptedReply(tool_calls=[ToolCallSpec("find_restaurant", {"cuisine": "thai"})]),
            ScriptedReply(
                tool_calls=[ToolCallSpec("book_table", {"restaurant": "Bangkok Garden", "people": 4})]
            ),
            ScriptedReply(text="Booked Bangkok Garden for 4 tonight, confirmation R-55."),
        ],
        expect="Booked Bangkok Garden for 4 tonight, confirmation R-55.",
        side_effects=1,
    ),
    Program(
        name="langgraph_anthropic",
        script=[
            ScriptedReply(tool_calls=[ToolCallSpec("lookup_order", {"order_id": "A-19"})]),
            ScriptedReply(tool_calls=[ToolCallSpec("refund_order", {"order_id": "A-19", "amount": 59.0})]),
            ScriptedReply(text="I refunded 59.0 for order A-19."),
        ],
        expect="I refunded 59.0 for order A-19.",
        side_effects=1,
    ),
]
