"""An agent whose in-house model client records each call as a step, but not the model's answer
(as an instrumentation that keeps only the request does): the run cannot be replayed."""

import json

from opentelemetry import trace

import agentreplay_otel
from agentreplay_otel.core import semconv

REQUEST = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Which day is cheaper?"}]}

with agentreplay_otel.run("inhouse", input=REQUEST["messages"][0]["content"]):
    with trace.get_tracer("inhouse-model").start_as_current_span(
        "chat gpt-4o-mini",
        attributes={
            semconv.GEN_AI_OPERATION_NAME: semconv.OP_CHAT,
            semconv.GEN_AI_REQUEST_MODEL: "gpt-4o-mini",
            semconv.STEP: 0,
            semconv.REQUEST: json.dumps(REQUEST),
        },
    ):
        answer = "Saturday"  # what the in-house client got back; it records no response
print(answer)
