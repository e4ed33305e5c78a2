"""The one place that sees every HTTP exchange of the LLM clients.

The OpenAI and Anthropic clients send through ``httpx2.Client.send`` / ``AsyncClient.send``, or
through the original ``httpx`` package's when the agent hands them an ``http_client`` of its own
(LiteLLM does, and so do proxies and corporate transports). Both packages' ``send`` are patched
once each (a package imported later is patched as it is imported); an answer given in the
agent's stead is built with the package of the request it answers. An exchange is seen once:
a send made while another is on its way (an ``httpx`` transport that sends through ``httpx2``,
or the reverse) is the first one's and passes through untouched. Then:

* inside a recorded call (:func:`._flight.in_flight`), the JSON body the library built is handed
  to the interceptor, which lets it go (recording, a fork's live step, perhaps with a fixed
  body), answers it from the recording (replay) or refuses it (a divergence, answered as
  a 400 the library raises and the call's wrapper turns back into the replay's error);
  the response is kept as received: a JSON body, or the events of a stream, teed as the
  library reads them, so raw and streaming-response wrappers are recorded too;
* outside every recorded call (an entry point no instrumentor wraps), the exchange is
  recorded as a call of its own, named by method and path, so it replays like any other.

Recording never breaks the request: any failure here is logged and the request goes on.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import json
import logging
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import wrapt
from opentelemetry import trace

from agentreplay_otel import intercept, semconv
from agentreplay_otel.errors import AgentReplayError
from agentreplay_otel.instrumentation import _flight, _wire
from agentreplay_otel.instrumentation._capture import DROPPED_HEADERS, after_send, header
from agentreplay_otel.instrumentation._llm import LLMCall, Recorder
from agentreplay_otel.recording import RecordedStep
from agentreplay_otel.runs import _run_for_call, current_run

_log = logging.getLogger(__name__)

_sending: contextvars.ContextVar[bool] = contextvars.ContextVar("agentreplay_sending", default=False)
CROSSING = "agentreplay.crossing"  # a translated request's way back (replay/_translate.py)
_REFUSED = 400  # not retried by either library with x-should-retry: false
PACKAGES = ("httpx2", "httpx")  # the transports patched: the clients' own, and the one agents hand them


def sending_live() -> bool:
    """Whether this thread or task is sending an LLM request live (a replay lets those connect)."""
    return _sending.get()


def package_of(message: Any) -> ModuleType:
    """The HTTP package (``httpx2`` or ``httpx``) a request or response belongs to: what answers it
    in the agent's stead is built with the same one, which the client library then reads."""
    name = type(message).__module__.partition(".")[0]
    return importlib.import_module(name if name in PACKAGES else "httpx2")


# --- one exchange -------------------------------------------------------------------------
def _json_body(request: Any) -> dict[str, Any] | None:
    if "json" not in header(request.headers, b"content-type"):
        return None
    try:
        body = json.loads(request.content or b"{}")
    except (ValueError, UnicodeDecodeError):
        return None
    return body if isinstance(body, dict) else None


def _with_body(request: Any, body: dict[str, Any]) -> Any:
    headers = {k: v for k, v in request.headers.items() if k.lower() != "content-length"}
    return package_of(request).Request(request.method, request.url, headers=headers, json=body, extensions=request.extensions)


def _before_send(call: LLMCall, request: Any) -> tuple[Any, Any | None]:
    """The request to send (perhaps fixed) and, when nothing is to be sent, the response to give.

    An interceptor that only lets requests go (recording, the guard) never reads the body: it is
    kept as the text the library encoded, not parsed here to be encoded again at the end.
    """
    interceptor = intercept.current()
    if not getattr(interceptor, "reads_request_body", True) and interceptor.acts:
        if "json" in header(request.headers, b"content-type"):
            try:
                call.exchange.request_text = (request.content or b"{}").decode("utf-8")
            except UnicodeDecodeError:
                return request, None
        return request, None
    body = _json_body(request)
    if body is None:
        return request, None
    call.exchange.request = body
    answer = intercept.current().on_request(call.provider, call.name, body, call.step)
    call.charged = answer.live  # a recorded answer (or a refusal) spent nothing
    if answer.error is not None:
        call.refusal = answer.error
        return request, _refusal(request, answer.error)
    if not intercept.current().acts:
        call.span.set_attribute(semconv.REPLAY_SOURCE, "live" if answer.live else "recorded")
    if answer.recorded is not None:
        return request, recorded_response(answer.recorded, request)
    if answer.route is not None:  # a fork onto another provider or endpoint (replay/_translate.py)
        call.exchange.request = answer.body
        return answer.route.outgoing(request, answer.body)
    if answer.body is not None and answer.body != body:
        call.exchange.request = answer.body
        return _with_body(request, answer.body), None
    return request, None


def _refusal(request: Any, error: AgentReplayError) -> Any:
    doc = {"type": "error", "error": {"type": "agentreplay_refused", "message": str(error)}}
    return package_of(request).Response(_REFUSED, json=doc, request=request, headers={"x-should-retry": "false"})


def recorded_response(step: RecordedStep, request: Any) -> Any:
    """A response carrying the recorded answer, for the client library to parse (an ``httpx2`` or
    ``httpx`` one, as the request is)."""
    status, headers = 200, {}
    if step.http:
        status = int(step.http.get("status", 200))
        headers = {k: v for k, v in dict(step.http.get("headers", {})).items() if k not in DROPPED_HEADERS}
    if step.stream is not None and "ndjson" in headers.get("content-type", ""):  # Ollama's: a JSON object a line
        body = "".join(e if isinstance(e, str) else json.dumps(e, separators=(",", ":")) + "\n" for e in step.stream).encode()
    elif step.stream is not None:
        body = sse_body(step.provider, step.stream)
        headers["content-type"] = "text/event-stream"
    else:
        body = (step.response or "{}").encode()
        headers.setdefault("content-type", "application/json")
    return package_of(request).Response(status, headers=headers, content=body, request=request)


def sse_body(provider: str, events: list[Any]) -> bytes:
    """Server-sent events as the provider sent them: ``event:`` lines where the API has them."""
    lines = []
    for event in events:
        data = event if isinstance(event, str) else json.dumps(event, separators=(",", ":"))
        kind = _event_type(data)
        if kind and (provider in _NAMED_EVENTS or kind.startswith("response.")):
            lines.append(f"event: {kind}\ndata: {data}\n\n")
        else:
            lines.append(f"data: {data}\n\n")
    if provider in _CHAT_COMPLETIONS and not any(line.startswith("event: response.") for line in lines):
        lines.append("data: [DONE]\n\n")
    return "".join(lines).encode()


_NAMED_EVENTS = frozenset({semconv.PROVIDER_ANTHROPIC, semconv.PROVIDER_COHERE})  # streams whose events are named
_CHAT_COMPLETIONS = frozenset({semconv.PROVIDER_OPENAI, semconv.PROVIDER_GROQ, semconv.PROVIDER_MISTRAL_AI})  # end: [DONE]


def _event_type(data: str) -> str | None:
    try:
        doc = json.loads(data)
    except ValueError:
        return None
    kind = doc.get("type") if isinstance(doc, dict) else None
    return kind if isinstance(kind, str) and kind != "chat.completion.chunk" else None


# --- calls no instrumentor wraps ---------------------------------------------------------------
def _client_provider(request: Any) -> str | None:
    """Which of the OpenAI and Anthropic clients sent this request: None for any other sender (the
    other clients their generator makes, Groq's among them, are known by what they send: ``_wire``)."""
    headers = request.headers
    if "x-stainless-lang" not in headers:
        return None
    if "anthropic-version" in headers:
        return semconv.PROVIDER_ANTHROPIC
    user_agent = header(headers, b"user-agent")  # OpenAI's clients, and subclasses of them, by their class name
    return None if any(c.sent(headers, user_agent) for c in _wire.STAINLESS) else semconv.PROVIDER_OPENAI


_OPERATIONS = (("/chat/completions", semconv.OP_CHAT), ("/messages", semconv.OP_CHAT),
               ("/completions", semconv.OP_TEXT_COMPLETION), ("/embeddings", semconv.OP_EMBEDDINGS), ("/responses", semconv.OP_CHAT))


def _recognised(request: Any) -> tuple[_wire.Wire, dict[str, Any]] | None:
    """The model call this request is by its path and body (``_wire``), whoever sent it, and that body
    (parsed once: the call is begun from it)."""
    if request.method != "POST" or not request.url.path.rstrip("/").endswith(_wire.PATHS):
        return None
    body = _json_body(request)
    wire = _wire.recognise(request.url.path, body, request.headers, header(request.headers, b"user-agent"))
    return (wire, body) if wire is not None and body is not None else None


def _opened(request: Any) -> tuple[LLMCall, _wire.API] | None:
    """A call of its own for a model call no wrapped entry point made, where it is recorded: the
    OpenAI and Anthropic clients' other methods (their instrumentor installed), and any client's
    request that reads as a model call (its instrumentor on, or a client nobody named)."""
    provider = _client_provider(request) if _users else None
    if provider is not None:
        path = request.url.path.rstrip("/")
        operation = next((op for suffix, op in _OPERATIONS if path.endswith(suffix)), path.rsplit("/", 1)[-1])
        api = _wire.ANTHROPIC if provider == semconv.PROVIDER_ANTHROPIC else _wire.OPENAI
        call = _own_call(request, _json_body(request), provider, operation, None, api)
        return (call, api) if call is not None else None
    found = _recognised(request) if _users or _watching else None
    if found is None or found[0].recorder is None:
        return None
    wire, body = found
    call = _own_call(request, body, wire.provider, wire.operation, wire.recorder, wire.api)
    return (call, wire.api) if call is not None else None


def _own_call(request: Any, body: dict[str, Any] | None, provider: str, operation: str,
              recorder: Recorder | None, api: _wire.API) -> LLMCall | None:
    """The call's span, begun as a wrapped call's is: the run's verdict first (a refusal raises)."""
    try:
        tracer = recorder.tracer if recorder is not None else trace.get_tracer(__name__)
        info = api.request(body or {})
        state = _run_for_call(tracer)
        intercept.current().before_llm(state.span, info.model)
        url = request.url
        attributes = {semconv.SERVER_ADDRESS: url.host, **({semconv.SERVER_PORT: url.port} if url.port else {}),
                      **info.attributes}
        return LLMCall(run=state, tracer=tracer, metrics=recorder.metrics if recorder is not None else None,
                       provider=provider, operation=operation, model=info.model, request=body or {},
                       attributes=attributes, input_messages=info.input_messages,
                       system_instructions=info.system_instructions)
    except AgentReplayError:
        raise
    except Exception:
        _log.exception("agentreplay: could not record %s %s", request.method, request.url.path)
        return None


# --- model calls not recorded -----------------------------------------------------------------
_unrecorded_warned: set[str] = set()
_unrecorded_now: contextvars.ContextVar[str | None] = contextvars.ContextVar("agentreplay_unrecorded", default=None)
UNRECORDED_EVENT = "agentreplay.unrecorded_call"


def llm_exchange(method: str, path: str, body: Any) -> bool:
    """Whether a request is a model call by its path and body (OpenAI-, Anthropic-, Ollama-,
    Cohere-shaped), whatever library made it."""
    return method.upper() == "POST" and _wire.recognise(path, body, {}, "") is not None


def _library(request: Any) -> str | None:
    """The client library named by the User-Agent (``ollama-python/0.4`` -> ``ollama-python``), if any."""
    agent = header(request.headers, b"user-agent").strip()
    name = agent.split("/", 1)[0].split(" ", 1)[0] if agent else ""
    return name if name and not name.startswith("python-httpx") else None


def unrecorded_call() -> str | None:
    """``POST HOST/PATH`` while the transport sends a model call that is not recorded (a replay's
    network guard names it when it blocks the connection)."""
    return _unrecorded_now.get()


def _unrecorded(request: Any) -> str | None:
    """A model call made outside every recorded call that is not recorded (``POST HOST/PATH``, else
    None): its client's instrumentor is off. Warned once per host and path while recording, and
    marked on the run; while replaying, named by the network guard that blocks it."""
    try:
        found = _recognised(request)
        if found is None:
            return None
        wire = found[0]
        where = f"{request.url.host}{':' + str(request.url.port) if request.url.port else ''}{request.url.path}"
        if not intercept.current().acts:  # a replay: the network guard names it
            return f"{request.method} {where}"
        library = wire.client.library if wire.client is not None else _library(request)
        state = current_run()
        if state is not None:
            state.span.add_event(UNRECORDED_EVENT, {"http.request.method": request.method,
                                                   "url.full": f"{request.url.scheme}://{where}",
                                                   "agentreplay.library": library or ""})
        with _lock:
            first = where not in _unrecorded_warned
            _unrecorded_warned.add(where)
        if first:
            who = (f"{library}'s instrumentor (agentreplay_{library}) is off" if wire.client is not None else
                   f"{library or 'its client'} is not recorded")
            sys.stderr.write(f"agentreplay: calls to {where} are not recorded: {who}; the run is incomplete "
                             "and a replay cannot answer them (see docs/recorder.md)\n")
        return f"{request.method} {where}"
    except Exception:
        _log.debug("agentreplay: could not read an unrecorded request", exc_info=True)
        return None


@contextlib.contextmanager
def _passing(request: Any) -> Iterator[None]:
    """Around the send of an exchange no recorded call owns: :func:`unrecorded_call` names it."""
    token = _unrecorded_now.set(_unrecorded(request))
    try:
        yield
    finally:
        _unrecorded_now.reset(token)


def _finisher(call: LLMCall, response: Any, api: _wire.API) -> Callable[[], None]:
    def finish() -> None:
        if response.status_code >= 400:
            call.fail(_HTTPError(f"HTTP {response.status_code}"))
        else:
            call.finish(_wire.result_of(api, call.exchange.body, call.exchange.events))

    weakref.finalize(response, finish)  # a response nobody reads to the end still ends its span
    return finish


class _HTTPError(Exception):
    """An unwrapped call answered with an HTTP error."""


# --- the patch ------------------------------------------------------------------------------
def _call_for(request: Any) -> tuple[LLMCall | None, _wire.API | None, Any | None]:
    """The call this exchange belongs to, the API whose bodies end it when the transport opened it (no
    wrapper did), and the response that refuses it when the guard does: a 400 the library raises, with
    the guard's reason (an exception raised here would be retried by the library, then reported as a
    connection error)."""
    call = _flight.call_in_flight()
    if call is not None:
        return call, None, None
    try:
        opened = _opened(request)
    except AgentReplayError as refused:
        return None, None, _refusal(request, refused)
    return (opened[0], opened[1], None) if opened is not None else (None, None, None)


def _prepared(call: LLMCall, request: Any) -> tuple[Any, Any | None]:
    try:
        return _before_send(call, request)
    except Exception:
        _log.exception("agentreplay: could not read a request")
        return request, None


@contextlib.contextmanager
def _live(call: LLMCall, own: bool) -> Iterator[None]:
    """Around the real send: the connection is the model's (a replay lets it through)."""
    token = _sending.set(True)
    try:
        yield
    except BaseException as exc:
        if own:
            call.fail(exc)
        raise
    finally:
        _sending.reset(token)


def _received(call: LLMCall, response: Any, own: _wire.API | None) -> Any:
    try:
        after_send(call, response, _finisher(call, response, own) if own is not None else None)
    except Exception:
        _log.exception("agentreplay: could not record a response")
    return response


def _send(original: Callable[..., Any]) -> Callable[..., Any]:
    def send(client: Any, request: Any, **kwargs: Any) -> Any:
        if _sending.get():  # an exchange on its way already: this send is part of it
            return original(client, request, **kwargs)
        call, own, refused = _call_for(request)
        if call is None:
            if refused is not None:
                return refused
            with _passing(request):
                return original(client, request, **kwargs)
        request, response = _prepared(call, request)
        if response is None:
            token = _sending.set(True)  # _live(call, own), inline: every exchange passes here
            try:
                response = original(client, request, **kwargs)
            except BaseException as exc:
                if own is not None:
                    call.fail(exc)
                raise
            finally:
                _sending.reset(token)
            if CROSSING in request.extensions:  # the answer back in the agent's API
                response = request.extensions[CROSSING].incoming(response)
        return _received(call, response, own)

    return send


def _asend(original: Callable[..., Any]) -> Callable[..., Any]:
    async def send(client: Any, request: Any, **kwargs: Any) -> Any:
        if _sending.get():
            return await original(client, request, **kwargs)
        call, own, refused = _call_for(request)
        if call is None:
            if refused is not None:
                return refused
            with _passing(request):
                return await original(client, request, **kwargs)
        request, response = _prepared(call, request)
        if response is None:
            token = _sending.set(True)  # _live(call, own), inline: every exchange passes here
            try:
                response = await original(client, request, **kwargs)
            except BaseException as exc:
                if own is not None:
                    call.fail(exc)
                raise
            finally:
                _sending.reset(token)
            if CROSSING in request.extensions:
                response = await request.extensions[CROSSING].aincoming(response)
        return _received(call, response, own)

    return send


_lock = threading.Lock()
_users = 0
_originals: dict[str, tuple[Any, Any]] = {}  # package -> (Client.send, AsyncClient.send) as found
_hooked: set[str] = set()
_watching = False  # patched to name the model calls no instrumentor records, whether or not one installed it


def _patch(module: ModuleType) -> None:
    """Patch one package's ``send`` (called with the lock held, or from its import hook)."""
    name = module.__name__
    if name in _originals or not (_users or _watching):
        return
    client, async_client = getattr(module, "Client", None), getattr(module, "AsyncClient", None)
    if client is None or async_client is None:
        return
    _originals[name] = (client.send, async_client.send)
    client.send = _send(client.send)
    async_client.send = _asend(async_client.send)


def _on_import(module: ModuleType) -> None:
    with _lock:
        _patch(module)


def install() -> None:
    """Patch the transports (once, however many instrumentors ask): ``httpx2`` and ``httpx`` now if
    they are imported, else when they are (an agent that never imports one pays nothing for it)."""
    global _users
    with _lock:
        _users += 1
        if _users > 1:
            return
        for name in PACKAGES:
            if name in sys.modules:
                _patch(sys.modules[name])
            elif name not in _hooked:
                _hooked.add(name)
                wrapt.register_post_import_hook(_on_import, name)


def watch() -> None:
    """Patch the transports (as :func:`install` does, and for good) only to name the model calls no
    instrumentor records: an agent whose only model client is one AgentReplay does not record (the
    ``ollama``, ``mistralai`` or ``cohere`` client) installs no instrumentor, yet is warned."""
    global _watching
    with _lock:
        if _watching:
            return
        _watching = True
        for name in PACKAGES:
            if name in sys.modules:
                _patch(sys.modules[name])
            elif name not in _hooked:
                _hooked.add(name)
                wrapt.register_post_import_hook(_on_import, name)


def uninstall() -> None:
    """Undo :func:`install` once the last instrumentor is gone (the patches stay while watched)."""
    global _users
    with _lock:
        _users = max(0, _users - 1)
        if _users or _watching:
            return
        for name, (send, asend) in list(_originals.items()):
            module = sys.modules[name]
            module.Client.send, module.AsyncClient.send = send, asend
            del _originals[name]
