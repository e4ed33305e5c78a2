"""An agent caught mid-run: it asks the model once inside a run, sends what it recorded, and the
process ends before the run does (its run span never arrives), as when an agent is still working."""

import os

import openai
from opentelemetry import trace

import agentreplay_otel

with agentreplay_otel.run("in-flight", input="Book me a flight to Lisbon on Friday."):
    openai.OpenAI(api_key="t", max_retries=0).chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "Book me a flight to Lisbon on Friday."}])
    trace.get_tracer_provider().force_flush()
    os._exit(0)
