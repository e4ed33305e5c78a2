"""redaction.py: with a redactor on, raw PII never reaches an exporter, and what is hashed is what is exported."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import agentreplay_otel
from agentreplay_otel import redaction, semconv
from agentreplay_otel.chain import ChainSpanProcessor, verify
from agentreplay_otel.errors import ConfigurationError
from agentreplay_otel.testing.providers import global_tracer_provider

PII = "Mail jane.doe@example.com or call +44 20 7946 0958; card 4111 1111 1111 1111."


def test_builtin_redactor_masks_email_phone_and_card():
    out = redaction.redact_pii("gen_ai.input.messages", PII)
    assert out == "Mail [EMAIL] or call [PHONE]; card [CARD]."


def test_builtin_redactor_keeps_ordinary_numbers():
    text = "Flight TP123 on 2026-12-04 for 2 adults, order 123456, total 412.50 EUR"
    assert redaction.redact_pii("x", text) == text


def test_card_number_failing_luhn_is_not_a_card():
    assert "[CARD]" not in redaction.redact_pii("x", "ref 4111 1111 1111 1112")


def test_load_by_entry_point_and_by_module_path():
    assert redaction.load({semconv.ENV_REDACTOR: "pii"}) is redaction.redact_pii
    assert redaction.load({semconv.ENV_REDACTOR: "agentreplay_otel.redaction:redact_pii"}) is redaction.redact_pii
    assert redaction.load({}) is None


@pytest.mark.parametrize("spec", ["nosuch", "agentreplay_otel.redaction:nosuch", "no.such.module:f"])
def test_bad_redactor_names_the_setting(spec):
    with pytest.raises(ConfigurationError, match="AGENTREPLAY_REDACTOR"):
        redaction.load({semconv.ENV_REDACTOR: spec})


@agentreplay_otel.tool
def lookup_customer(email: str) -> dict:
    return {"email": email, "phone": "+44 20 7946 0958", "note": PII}


def test_raw_pii_never_reaches_the_exporter():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(ChainSpanProcessor(SimpleSpanProcessor(exporter), redactor=redaction.redact_pii))
    with global_tracer_provider(provider), agentreplay_otel.run("support", input={"message": PII}) as run:
        lookup_customer("jane.doe@example.com")
        run.set_output("Wrote to jane.doe@example.com")
    spans = exporter.get_finished_spans()
    exported = " ".join(str(v) for s in spans for v in (s.attributes or {}).values())
    for secret in ("jane.doe@example.com", "7946 0958", "4111 1111"):
        assert secret not in exported
    assert "[EMAIL]" in exported and "[CARD]" in exported
    assert verify(spans).intact  # the hash covers the redacted text, exactly as exported
