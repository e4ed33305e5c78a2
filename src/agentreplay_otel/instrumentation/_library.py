"""The skeleton every instrumentor of ours shares, with one hook for what is the library's own.

Turning one on: ours first (:mod:`._precedence` turns another instrumentor of the library off), then
the wrapping is deferred until the agent imports the library (:mod:`._deferred`: start-up pays
nothing for a library never imported), then the transport is patched (for clients that send over
``httpx``/``httpx2``) and the library's methods are wrapped (:meth:`LibraryInstrumentor.wrap`),
each through :class:`~._layout.Wraps`, so that turning it off unwraps exactly what was wrapped.
A provider writes its requirement, the module whose import arms it, and the hook; nothing else.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, ClassVar

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from agentreplay_otel.instrumentation import _precedence, _transport
from agentreplay_otel.instrumentation._deferred import Deferred
from agentreplay_otel.instrumentation._layout import Wraps
from agentreplay_otel.instrumentation._llm import Recorder


class LibraryInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """One library's instrumentor (``opentelemetry-instrument`` loads it by its entry point)."""

    requirements: ClassVar[tuple[str, ...]]  # what instrumentation_dependencies() says: ("openai >= 1",)
    module: ClassVar[str]  # the module whose import applies the wrapping ("": at once, it imports nothing)
    sends_http: ClassVar[bool] = True  # its client sends over httpx/httpx2: the transport records it
    _deferred: ClassVar[Deferred]
    _wraps: ClassVar[Wraps]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "module" in cls.__dict__:  # each library's own record of what it wrapped, and its pending wrap
            cls._wraps = Wraps()
            if cls.module:
                cls._deferred = Deferred(cls.module)

    def instrumentation_dependencies(self) -> Collection[str]:
        return self.requirements

    def wrap(self, wraps: Wraps, recorder: Recorder, **kwargs: Any) -> None:
        """The library's own part: wrap its methods through ``wraps``, recording on ``recorder``."""
        raise NotImplementedError

    def unwrapped(self) -> None:
        """Undo what :meth:`wrap` did besides wrapping (an environment switch it set), once unwrapped."""

    def _instrument(self, **kwargs: Any) -> None:
        _precedence.claim(self)  # another instrumentor of the library is turned off, before ours wraps it
        if self.module:
            self._deferred.arm(lambda: self._apply(kwargs))
        else:
            self._apply(kwargs)

    def _apply(self, kwargs: dict[str, Any]) -> None:
        recorder = Recorder.for_instrumentor(type(self).__module__, kwargs)
        if self.sends_http:
            _transport.install()  # every exchange of the client, whichever method made it
        self.wrap(self._wraps, recorder, **kwargs)

    def _uninstrument(self, **kwargs: Any) -> None:
        _precedence.release(self)
        if self.module and not self._deferred.disarm():
            return
        if self.sends_http:
            _transport.uninstall()
        self._wraps.unwrap_all()
        self.unwrapped()
