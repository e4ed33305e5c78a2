"""The labelled runs, recorded once per session through the SDK's real recording path (``analysiskit``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from analysiskit import CASES, Case, recorder

from agentreplay_otel.canonical import SpanRecord


@pytest.fixture(scope="session")
def recorded() -> Iterator[dict[str, tuple[Case, list[SpanRecord]]]]:
    """Every case of the labelled set by name: the case and its recorded spans. The instrumentors are
    off again before any test runs: other modules' tests instrument with providers of their own."""
    with recorder() as rec:
        cases = {case.name: (case, rec.record(case)) for case in CASES}
    yield cases
