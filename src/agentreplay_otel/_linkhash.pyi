from collections.abc import Iterable, Mapping
from typing import Any

from agentreplay_otel.canonical import SpanRecord

def canonical(record: SpanRecord) -> bytes | None: ...
def link_hash(prev_hash: str, record: SpanRecord) -> str: ...
def link_span(
    prev_hash: str,
    fields: tuple[str, str, str, str, str, int, int, str, str],
    attributes: dict[str, Any],
    events: Iterable[tuple[str, int, Mapping[str, Any] | None]],
) -> str | None: ...
