from collections.abc import Callable
from typing import Any

from agentreplay_otel.core import SpanRecord

def decode(
    body: bytes, array_string: Callable[[list[Any], bool], str]
) -> tuple[list[list[Any]], list[SpanRecord], set[str], set[int], list[str | None]] | None: ...
