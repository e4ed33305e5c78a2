"""Install a tracer provider as OpenTelemetry's global one for a test, and restore it after.

OpenTelemetry lets the global provider be set once per process; tests that exercise
code using the global tracer (runs, tools, auto-instrumentation) need to swap it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.util._once import Once


def swap_global_tracer_provider(provider: trace.TracerProvider | None) -> trace.TracerProvider | None:
    """Make ``provider`` the global tracer provider; returns the previous one."""
    previous = trace._TRACER_PROVIDER  # noqa: SLF001
    trace._TRACER_PROVIDER = provider  # noqa: SLF001
    once = Once()
    if provider is not None:
        once._done = True  # noqa: SLF001 - as if set_tracer_provider() had run
    trace._TRACER_PROVIDER_SET_ONCE = once  # noqa: SLF001
    return previous


@contextmanager
def global_tracer_provider(provider: trace.TracerProvider) -> Iterator[trace.TracerProvider]:
    previous = swap_global_tracer_provider(provider)
    try:
        yield provider
    finally:
        swap_global_tracer_provider(previous)
