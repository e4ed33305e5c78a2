"""The agent's libraries' own response caches, kept from answering while a run is recorded or replayed.

Why: a library that answers a request from its own cache answers it inside the agent's process, before
the request reaches the transport where AgentReplay records and replays it. DSPy keeps an on-disk cache
keyed by the request, so the recording fills it; the replay then sends the same requests, DSPy answers
them itself, the agent calls its tool where the recording has a model call, and the replay diverges at
its first step; a second recording of the same program records no model call at all. A cache that
answers nothing and keeps nothing makes every recording and every replay see the model (or the
recording) itself, as the run that was recorded did.

So while this process records or replays (under the launcher, :func:`install`), the known response
caches neither answer nor store:

* DSPy's (``dspy.clients.cache.Cache``: memory and disk; ``dspy.configure_cache``): no lookup answers, no
  response is stored, and a cache not built yet is configured off, so none is opened on disk;
* LiteLLM's (``litellm.cache = Cache(...)``, ``litellm.enable_cache()``, ``caching=True``): the cache's
  lookups miss and its writes are dropped, whatever backend (local, disk, Redis, S3...);
* LangChain's (``set_llm_cache(...)`` and a model's own ``cache=``): every ``BaseCache``'s lookups miss
  and its updates are dropped (``InMemoryCache``, ``SQLiteCache`` and the others, defined now or later);
* requests-cache (``CachedSession``, ``install_cache()``): each request is sent as with the session's own
  ``cache_disabled()``, reading and writing nothing;
* hishel (``hishel.httpx``/``hishel.httpx2`` cache transports and clients, ``hishel.requests.CacheAdapter``):
  each request goes to the transport beneath the cache.

Each is found when the agent imports its library (a post-import hook): an agent that never imports one
pays nothing for it. The user's cache objects stay as they are (their settings, their files); only their
use is skipped. ``AGENTREPLAY_LIBRARY_CACHES=keep`` keeps them answering, and says once, when one is first
used, that a replay may then diverge; ``off`` (the default) says once, at info level, which it turned off.
"""

from __future__ import annotations

import copy
import functools
import inspect
import logging
import os
import sys
import threading
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

import wrapt

from agentreplay_otel import semconv

_log = logging.getLogger(__name__)

# "off" (the default): the caches neither answer nor store; "keep": they do, and a replay may diverge
ENV_LIBRARY_CACHES = semconv.ENV_LIBRARY_CACHES
OFF = "off"
KEEP = "keep"

# library -> how it is called in what is said of it
_NAMES = {
    "dspy": "DSPy's response cache",
    "litellm": "LiteLLM's response cache",
    "langchain": "LangChain's LLM cache",
    "requests-cache": "requests-cache",
    "hishel": "hishel's HTTP cache",
}

_MISSING = object()
_super: Any = super  # two-argument super() in the functions put on a library's classes (mypy reads it as a method's)
_lock = threading.RLock()
_mode: str | None = None  # None: not installed
_hooked: set[str] = set()  # modules whose post-import hook is registered (wrapt keeps them for good)
_applied: set[str] = set()  # modules whose caches are wrapped now
_patches: list[tuple[Any, str, Any]] = []  # (owner, attribute, what it was, or _MISSING): undone by uninstall
_said: set[str] = set()  # libraries already named on the log
_bypassed: dict[str, int] = {}  # library -> lookups and writes skipped (tests, diagnostics)


def mode(environ: Mapping[str, str] | None = None) -> str:
    """``off`` (the default) or ``keep``, as ``AGENTREPLAY_LIBRARY_CACHES`` says; another value is off, warned."""
    env = os.environ if environ is None else environ
    raw = env.get(ENV_LIBRARY_CACHES, "").strip().lower()
    if raw in ("", OFF, KEEP):
        return raw or OFF
    _log.warning("agentreplay: %s=%r is neither %r nor %r: the libraries' response caches are off",
                 ENV_LIBRARY_CACHES, raw, OFF, KEEP)
    return OFF


def install(environ: Mapping[str, str] | None = None) -> str:
    """Keep the known response caches from answering in this process (or watch them, with ``keep``).

    Idempotent: the first call's mode holds until :func:`uninstall`. Returns the mode."""
    global _mode
    with _lock:
        if _mode is not None:
            return _mode
        _mode = mode(environ)
        for module in _HANDLERS:
            if module in sys.modules:
                _on_import(sys.modules[module])
            elif module not in _hooked:
                _hooked.add(module)
                wrapt.register_post_import_hook(_on_import, module)
        return _mode


def installed() -> bool:
    with _lock:
        return _mode is not None


def uninstall() -> None:
    """Undo :func:`install`: the caches answer again (tests)."""
    global _mode
    with _lock:
        _mode = None
        for owner, name, previous in reversed(_patches):
            if previous is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, previous)
        _patches.clear()
        _applied.clear()
        _said.clear()
        _bypassed.clear()


def bypassed() -> dict[str, int]:
    """How many lookups and writes each library's cache was kept from since :func:`install`."""
    with _lock:
        return dict(_bypassed)


def _off() -> bool:
    return _mode == OFF


def _on_import(module: ModuleType) -> None:
    with _lock:
        name = module.__name__
        if _mode is None or name in _applied:
            return
        handler = _HANDLERS.get(name)
        if handler is None:
            return
        _applied.add(name)
        library, apply = handler
        try:
            found = apply(module)
        except Exception as exc:  # noqa: BLE001 - never break the agent's own import
            _log.warning("agentreplay: %s could not be turned off (%s: %s): a replay may diverge where it answers",
                         _NAMES[library], type(exc).__name__, exc)
            return
        if found and _off() and library not in _said:
            _said.add(library)
            _log.info("agentreplay: %s is off while this process records or replays (%s=%s keeps it)",
                      _NAMES[library], ENV_LIBRARY_CACHES, KEEP)


def _used(library: str) -> bool:
    """Whether a cache of ``library`` is to be skipped now; with ``keep``, warns once that it answers."""
    if _off():
        with _lock:
            _bypassed[library] = _bypassed.get(library, 0) + 1
        return True
    if _mode == KEEP and library not in _said:
        with _lock:
            first = library not in _said
            _said.add(library)
        if first:
            _log.warning(
                "agentreplay: %s is kept (%s=%s): what it answers never reaches the transport AgentReplay "
                "records and replays, so a replay may diverge where it answers instead of the recording",
                _NAMES[library], ENV_LIBRARY_CACHES, KEEP)
    return False


def _replace(owner: Any, name: str, new: Any) -> None:
    _patches.append((owner, name, owner.__dict__.get(name, _MISSING)))
    setattr(owner, name, new)


def _skipping(library: str, original: Callable[..., Any], result: Any = None) -> Callable[..., Any]:
    """``original`` (a method), or ``result`` without calling it while the caches are off."""
    if inspect.iscoroutinefunction(original):
        @functools.wraps(original)
        async def skipped_async(*args: Any, **kwargs: Any) -> Any:
            if _used(library):
                return result
            return await original(*args, **kwargs)
        return skipped_async

    @functools.wraps(original)
    def skipped(*args: Any, **kwargs: Any) -> Any:
        if _used(library):
            return result
        return original(*args, **kwargs)
    return skipped


def _skip_methods(library: str, cls: type, names: tuple[str, ...]) -> bool:
    """Each of ``names`` that ``cls`` itself defines returns None without running while off."""
    found = False
    for name in names:
        original = cls.__dict__.get(name)
        if original is None or not callable(original):
            continue
        _replace(cls, name, _skipping(library, original))
        found = True
    return found


# --- DSPy -----------------------------------------------------------------------------------------
def _dspy_cache(module: ModuleType) -> bool:
    """``Cache.get`` misses and ``Cache.put`` keeps nothing, whichever Cache ``dspy.cache`` is."""
    cls = getattr(module, "Cache", None)
    return isinstance(cls, type) and _skip_methods("dspy", cls, ("get", "put"))


def _dspy(module: ModuleType) -> bool:
    """A default cache not built yet is made off (``dspy.cache`` is built on first use: on disk, in
    ``DSPY_CACHEDIR`` or ``~/.dspy_cache``), so nothing is opened there; one the agent configures later
    is skipped by :func:`_dspy_cache`."""
    configure = getattr(module, "configure_cache", None)
    if _off() and callable(configure) and "cache" not in module.__dict__:
        configure(enable_disk_cache=False, enable_memory_cache=False)
    return False  # said by dspy.clients.cache's handler


# --- LiteLLM --------------------------------------------------------------------------------------
_LITELLM_LOOKUPS = ("get_cache", "async_get_cache")
_LITELLM_WRITES = ("add_cache", "async_add_cache", "async_add_cache_pipeline", "add_embedding_response_to_cache",
                   "batch_cache_write")


def _litellm(module: ModuleType) -> bool:
    """``litellm.caching.caching.Cache``: lookups miss, writes are dropped (any ``litellm.cache``, set
    before or after this, whatever its backend)."""
    cls = getattr(module, "Cache", None)
    return isinstance(cls, type) and _skip_methods("litellm", cls, _LITELLM_LOOKUPS + _LITELLM_WRITES)


# --- LangChain ------------------------------------------------------------------------------------
_LANGCHAIN_METHODS = ("lookup", "alookup", "update", "aupdate")


def _langchain(module: ModuleType) -> bool:
    """Every ``BaseCache`` (the global one of ``set_llm_cache`` and a model's own ``cache=``): lookups
    miss and updates are dropped, in the classes defined now and in those defined later."""
    base = getattr(module, "BaseCache", None)
    if not isinstance(base, type):
        return False
    seen: set[type] = set()
    todo = [base]
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        _skip_methods("langchain", cls, _LANGCHAIN_METHODS)
        todo.extend(cls.__subclasses__())
    root: type = base
    previous = root.__dict__.get("__init_subclass__")

    def init_subclass(cls: type, **kwargs: Any) -> None:
        if isinstance(previous, classmethod):
            previous.__func__(cls, **kwargs)
        else:
            _super(root, cls).__init_subclass__(**kwargs)
        with _lock:
            if _mode is not None:
                _skip_methods("langchain", cls, _LANGCHAIN_METHODS)

    _replace(base, "__init_subclass__", classmethod(init_subclass))
    return True


# --- requests-cache -------------------------------------------------------------------------------
def _requests_cache(module: ModuleType) -> bool:
    """``CacheActions.from_request`` as if the session's settings said ``disabled`` (what
    ``CachedSession.cache_disabled()`` does, for this request alone): nothing read, nothing written."""
    cls = getattr(module, "CacheActions", None)
    method = cls.__dict__.get("from_request") if isinstance(cls, type) else None
    if not isinstance(method, classmethod):
        return False
    original = method.__func__

    @functools.wraps(original)
    def from_request(klass: type, *args: Any, **kwargs: Any) -> Any:
        if _used("requests-cache"):
            if len(args) > 2:
                args = (*args[:2], _disabled_settings(args[2]), *args[3:])
            else:
                kwargs["settings"] = _disabled_settings(kwargs.get("settings"))
        return original(klass, *args, **kwargs)

    _replace(cls, "from_request", classmethod(from_request))
    return True


def _disabled_settings(settings: Any) -> Any:
    """The session's settings, disabled, for one request (the session's own stay as they are)."""
    if settings is None:
        from requests_cache.policy.settings import CacheSettings  # type: ignore[import-not-found,unused-ignore]
        return CacheSettings(disabled=True)
    settings = copy.copy(settings)
    settings.disabled = True
    return settings


# --- hishel ---------------------------------------------------------------------------------------
def _beneath(transport: Any) -> Any:
    inner = getattr(transport, "next_transport", None)
    return inner if inner is not None else getattr(transport, "_transport", None)


def _hishel(module: ModuleType) -> bool:
    """hishel's httpx/httpx2 cache transports send to the transport beneath them, its requests adapter
    as a plain ``HTTPAdapter`` (hishel 1.x and later; 0.x's top-level ``CacheTransport`` too)."""
    found = False
    for name in ("CacheTransport", "SyncCacheTransport"):
        cls = getattr(module, name, None)
        if isinstance(cls, type) and "handle_request" in cls.__dict__:
            original = cls.__dict__["handle_request"]

            def handle_request(self: Any, request: Any, _original: Any = original) -> Any:
                inner = _beneath(self)
                if inner is not None and _used("hishel"):
                    return inner.handle_request(request)
                return _original(self, request)

            _replace(cls, "handle_request", functools.wraps(original)(handle_request))
            found = True
    cls = getattr(module, "AsyncCacheTransport", None)
    if isinstance(cls, type) and "handle_async_request" in cls.__dict__:
        original_async = cls.__dict__["handle_async_request"]

        async def handle_async_request(self: Any, request: Any) -> Any:
            inner = _beneath(self)
            if inner is not None and _used("hishel"):
                return await inner.handle_async_request(request)
            return await original_async(self, request)

        _replace(cls, "handle_async_request", functools.wraps(original_async)(handle_async_request))
        found = True
    found_adapter = getattr(module, "CacheAdapter", None)
    if isinstance(found_adapter, type) and "send" in found_adapter.__dict__:
        adapter: type = found_adapter
        original_send = adapter.__dict__["send"]

        def send(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
            if _used("hishel"):  # the plain HTTPAdapter beneath hishel's
                return _super(adapter, self).send(request, *args, **kwargs)
            return original_send(self, request, *args, **kwargs)

        _replace(adapter, "send", functools.wraps(original_send)(send))
        found = True
    return found


# module whose import finds the cache -> (library, what turns it off; True when it found one)
_HANDLERS: dict[str, tuple[str, Callable[[ModuleType], bool]]] = {
    "dspy": ("dspy", _dspy),
    "dspy.clients.cache": ("dspy", _dspy_cache),
    "litellm.caching.caching": ("litellm", _litellm),
    "langchain_core.caches": ("langchain", _langchain),
    "requests_cache.policy.actions": ("requests-cache", _requests_cache),
    "hishel": ("hishel", _hishel),
    "hishel.httpx": ("hishel", _hishel),
    "hishel.httpx2": ("hishel", _hishel),
    "hishel.requests": ("hishel", _hishel),
}
