"""The agent's own nondeterminism, recorded and served back: wall-clock reads, ``uuid4`` and ``random``.

A request that embeds ``datetime.now()``, a ``uuid4()`` or a ``random.choice`` differs on every
run, so its replay would diverge although nothing changed. While recording, the values the
agent's own code draws are kept in order (library code, this SDK's included, is not counted: its
draws are not the agent's and come in no fixed order); each run span carries them at its end
(``agentreplay.nondeterminism``). In a replay the same values come back in the same order, and
the ``random`` module is seeded as it was. Past the recorded values the real sources answer.

Covered: ``time.time``, ``datetime.datetime.now/utcnow/today``, ``uuid.uuid4`` and the ``random``
module's global functions (seeded at start-up). Not covered: ``os.urandom``, ``secrets``,
``time.time_ns``/``monotonic``/``perf_counter``, ``random.Random`` instances the agent seeds
itself, values fixed by code imported before start-up (``from time import time`` in a module
loaded earlier), and other processes. ``AGENTREPLAY_DETERMINISM=off`` turns it off.
"""

from __future__ import annotations

import datetime as _dt
import os
import random
import sys
import sysconfig
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import INVALID_SPAN_ID, INVALID_TRACE_ID

from agentreplay_otel import codec

_REAL_TIME = time.time
_REAL_UUID4 = uuid.uuid4
_REAL_DATETIME = _dt.datetime


@dataclass
class Draws:
    """What the agent's code drew, in order, per source."""

    seed: int = 0
    time: list[float] = field(default_factory=list)
    uuid4: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        return codec.to_json(self)

    @classmethod
    def from_json(cls, text: str) -> Draws:
        return codec.from_json(cls, text)


def _library_prefixes() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    roots.add(os.path.dirname(os.path.abspath(__file__)))  # this SDK, wherever it is installed
    return (*sorted(roots), "<frozen")


_LIBRARY = _library_prefixes()


def _agent_called() -> bool:
    """Whether the caller two frames up (the one that called the patched function) is agent code."""
    filename = sys._getframe(2).f_code.co_filename  # noqa: SLF001
    return not filename.startswith(_LIBRARY)


class _Source:
    """Records (``served`` is None) or serves back the agent's draws."""

    def __init__(self, draws: Draws, *, serving: bool) -> None:
        self.draws = draws
        self.serving = serving
        self._lock = threading.Lock()
        self._next = {"time": 0, "uuid4": 0}

    def take(self, kind: str, real: Callable[[], Any], encode: Callable[[Any], Any],
             decode: Callable[[Any], Any]) -> Any:
        values: list[Any] = getattr(self.draws, kind)
        with self._lock:
            if self.serving:
                i = self._next[kind]
                if i < len(values):
                    self._next[kind] = i + 1
                    return decode(values[i])
                return real()
            value = real()
            values.append(encode(value))
            return value


_source: _Source | None = None


class PrivateIdGenerator(IdGenerator):
    """Trace and span ids from a generator of their own, never the ``random`` module: a replay
    seeds that one as the recording was, and its run must not get the recorded run's ids."""

    def __init__(self) -> None:
        self._random = random.Random(os.urandom(16))

    def generate_span_id(self) -> int:
        span_id = self._random.getrandbits(64)
        while span_id == INVALID_SPAN_ID:
            span_id = self._random.getrandbits(64)
        return span_id

    def generate_trace_id(self) -> int:
        trace_id = self._random.getrandbits(128)
        while trace_id == INVALID_TRACE_ID:
            trace_id = self._random.getrandbits(128)
        return trace_id


def _time() -> float:
    if _source is None or not _agent_called():
        return _REAL_TIME()
    return float(_source.take("time", _REAL_TIME, float, float))


def _uuid4() -> uuid.UUID:
    if _source is None or not _agent_called():
        return _REAL_UUID4()
    return _source.take("uuid4", _REAL_UUID4, str, uuid.UUID)  # type: ignore[no-any-return]


class _DatetimeType(type(_REAL_DATETIME)):  # type: ignore[misc]
    def __instancecheck__(cls, obj: Any) -> bool:  # real datetimes stay datetimes
        return isinstance(obj, _REAL_DATETIME)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, _REAL_DATETIME)


class _Datetime(_REAL_DATETIME, metaclass=_DatetimeType):
    """``datetime.datetime`` whose clock reads go through the recorded ``time.time``."""

    @classmethod
    def now(cls, tz: _dt.tzinfo | None = None) -> _dt.datetime:  # type: ignore[override]
        if _source is None or not _agent_called():
            return _REAL_DATETIME.now(tz)
        return _REAL_DATETIME.fromtimestamp(_source.take("time", _REAL_TIME, float, float), tz)

    @classmethod
    def utcnow(cls) -> _dt.datetime:  # type: ignore[override]
        if _source is None or not _agent_called():
            return _REAL_DATETIME.utcnow()
        stamp = _source.take("time", _REAL_TIME, float, float)
        return _REAL_DATETIME.fromtimestamp(stamp, _dt.UTC).replace(tzinfo=None)

    @classmethod
    def today(cls) -> _dt.datetime:  # type: ignore[override]
        if _source is None or not _agent_called():
            return _REAL_DATETIME.today()
        return _REAL_DATETIME.fromtimestamp(_source.take("time", _REAL_TIME, float, float))


def install(draws: Draws | None = None) -> Draws:
    """Record the agent's draws from now on, or (``draws`` given, a replay) serve them back."""
    global _source
    serving = draws is not None
    if draws is None:
        draws = Draws(seed=int.from_bytes(os.urandom(8), "big"))
    _source = _Source(draws, serving=serving)
    random.seed(draws.seed)
    time.time = _time  # type: ignore[assignment]
    uuid.uuid4 = _uuid4
    _dt.datetime = _Datetime  # type: ignore[misc]
    return draws


def uninstall() -> None:
    global _source
    _source = None
    time.time = _REAL_TIME
    uuid.uuid4 = _REAL_UUID4
    _dt.datetime = _REAL_DATETIME  # type: ignore[misc]


def recorded() -> str | None:
    """The draws so far, for the run span that ends now (None when nothing is recorded)."""
    source = _source
    if source is None or source.serving:
        return None
    with source._lock:  # noqa: SLF001
        return source.draws.to_json()
