"""The chain's copy of a span (its attributes and events replaced) reads as the SDK's constructor
would have made it, whether copied field by field or built."""

from __future__ import annotations

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from agentreplay_otel.chain import _READABLE_FIELDS, _copy_span

_READ = ("name", "context", "parent", "resource", "links", "kind", "status", "start_time", "end_time",
         "instrumentation_scope", "instrumentation_info", "dropped_attributes", "dropped_events", "dropped_links")


def _ended_span() -> ReadableSpan:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "copy"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("copy", "1.0")
    with tracer.start_as_current_span("parent") as parent:
        span = tracer.start_span("child", kind=SpanKind.CLIENT, attributes={"a": 1},
                                 links=[Link(parent.get_span_context(), {"why": "test"})])
        span.add_event("e", {"k": "v"})
        span.set_status(Status(StatusCode.ERROR, "boom"))
        span.end()
    return exporter.get_finished_spans()[0]


def test_the_copy_reads_as_the_constructor_makes_it() -> None:
    span = _ended_span()
    assert type(span) is ReadableSpan and span.__dict__.keys() == _READABLE_FIELDS  # copied field by field
    attributes, events = {"b": "2"}, [Event("f", {"x": "y"}, 5)]
    fast = _copy_span(span, attributes, events)
    built = ReadableSpan(name=span.name, context=span.context, parent=span.parent, resource=span.resource,
                         attributes=attributes, events=events, links=span.links, kind=span.kind,
                         status=span.status, start_time=span.start_time, end_time=span.end_time,
                         instrumentation_scope=span.instrumentation_scope)
    for name in _READ:
        assert getattr(fast, name) == getattr(built, name), name
    assert dict(fast.attributes) == attributes and list(fast.events) == events
    assert fast.to_json() == built.to_json()
    assert dict(span.attributes) == {"a": 1}  # the span copied is left as it was
