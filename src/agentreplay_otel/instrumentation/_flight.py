"""Which recorded call owns the HTTP exchange being made here: the one fact the wrapped entry
points and the transport share.

A call's wrapper (:mod:`._wrap`) puts its call in flight while the library sends; the transport
(:mod:`._transport`) gives the exchange it sees to the call in flight, and opens a call of its own
when there is none. Kept apart from both so that each depends on it, and neither on the other.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
from collections.abc import Iterator

from agentreplay_otel.instrumentation._llm import LLMCall

_log = logging.getLogger("agentreplay_otel.instrumentation._transport")  # what the transport missed: its logger

_in_flight: contextvars.ContextVar[LLMCall | None] = contextvars.ContextVar("agentreplay_llm_call", default=None)


def call_in_flight() -> LLMCall | None:
    """The recorded call whose request is being made here, if any."""
    return _in_flight.get()


@contextlib.contextmanager
def in_flight(call: LLMCall) -> Iterator[None]:
    """While the library makes the request of ``call``, its HTTP exchange belongs to it."""
    token = _in_flight.set(call)
    try:
        yield
    finally:
        _in_flight.reset(token)


def take_flight(call: LLMCall) -> contextvars.Token[LLMCall | None]:
    """:func:`in_flight` without a generator (a call's wrapper enters it on every call): the token
    :func:`land` takes back."""
    return _in_flight.set(call)


def land(token: contextvars.Token[LLMCall | None]) -> None:
    """End what :func:`take_flight` began: the exchanges made after it are no longer the call's."""
    _in_flight.reset(token)


_unseen_lock = threading.Lock()
_unseen_warned: set[str] = set()


def check_seen(call: LLMCall, library: str) -> bool:
    """Whether the transport saw the exchange of ``call``, a call that returned; warned once per
    library when it did not (its client sends by a way neither package's ``send`` is on: the call is
    recorded from the parsed response, and a replay cannot answer it)."""
    if call.exchange.status is not None or call.refusal is not None:
        return True
    with _unseen_lock:
        first = library not in _unseen_warned
        _unseen_warned.add(library)
    if first:
        _log.warning("agentreplay: %s calls: an HTTP exchange was not seen: the client sends through neither "
                     "httpx2's nor httpx's Client.send; it is recorded from the parsed response and a replay "
                     "cannot answer it", library)
    return False
