"""Replay mode: the agent's own code runs again, answered from its recording.

The CLI writes a bundle (the recording and a plan) and starts the agent with
``AGENTREPLAY_REPLAY=bundle.json``. The SDK then installs one :class:`ReplaySession`:

* every LLM call is matched to the recorded call at the same position (kind, model and a
  fingerprint of the canonical request); its recorded response goes back through the
  client library's own HTTP layer (``httpx2``), so the library builds its own response
  objects and streams, exactly as when it was recorded;
* every ``@tool`` returns its recorded result; its body never runs;
* any other network connection is refused and counted (the OTLP exporter excepted);
* the first difference is a :class:`Divergence` naming the step, the recorded span, the
  closest recorded call and the fields that differ.

Record and replay share one path (the instrumentors' wrappers); only where answers
come from differs. A report (JSON) is written when the process exits.
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import difflib
import enum
import json
import logging
import os
import socket
import threading
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentreplay_otel import semconv
from agentreplay_otel.errors import AgentReplayError, RunHalted, ScopeViolation
from agentreplay_otel.recording import KIND_LLM, KIND_TOOL, RecordedStep, Recording, request_fingerprint

_log = logging.getLogger(__name__)

ENV_REPLAY = "AGENTREPLAY_REPLAY"
ENV_REPLAY_REPORT = "AGENTREPLAY_REPLAY_REPORT"


class ReplayDivergence(AgentReplayError):
    """The agent asked for something the recording does not have at this step."""

    def __init__(self, divergence: Divergence) -> None:
        super().__init__(divergence.summary())
        self.divergence = divergence


class ReplayNetworkBlocked(AgentReplayError):
    """A network connection the replay does not allow (replays make no live calls)."""


class ReplayedToolError(AgentReplayError):
    """A tool call that failed in the recording fails again, with the recorded message."""


def recorded_failure(step: RecordedStep) -> AgentReplayError:
    """The failure a recorded tool call ended in: enforcement decisions as their own type (so the
    agent meets the same ``ScopeViolation`` or ``RunHalted``), anything else as ReplayedToolError."""
    message = step.error.split(": ", 1)[1] if ": " in step.error else step.error
    if step.error_type == ScopeViolation.__qualname__:
        return ScopeViolation(message)
    if step.error_type == RunHalted.__qualname__:
        return RunHalted(message)
    return ReplayedToolError(f"{step.error_type or 'error'} (recorded): {message}")


class ForkComplete(AgentReplayError):
    """The fork made the live steps it was asked for; the agent stops here."""


class Mode(enum.StrEnum):
    STRICT = "strict"  # every answer recorded; the first difference fails
    REGRESSION = "regression"  # a new version: recorded while requests match, then on_divergence
    FORK = "fork"  # recorded up to fork_at, the fix applied there, live from there


@dataclass(frozen=True, kw_only=True)
class Plan:
    """What the replay should do; written by the CLI beside the recording."""

    mode: Mode = Mode.STRICT
    on_divergence: str = "fail"  # fail | live (regression)
    fork_at: int | None = None
    fork_steps: int | None = None  # live LLM calls after the fork; None: to the end
    fix: dict[str, Any] = field(default_factory=dict)  # system, message, model, temperature, patch
    allow: list[str] = field(default_factory=list)  # host:port the process may still reach (OTLP)


@dataclass(frozen=True, kw_only=True)
class FieldDiff:
    path: str
    recorded: Any
    replayed: Any


@dataclass(frozen=True, kw_only=True)
class Divergence:
    step: int
    reason: str  # request-differs, kind-differs, extra-call, missing-calls
    kind: str  # what the agent did at this step (llm, tool, or "" when it stopped)
    name: str
    recorded_step: int | None = None
    recorded_span_id: str | None = None
    recorded_name: str | None = None
    closest_step: int | None = None
    fields: list[FieldDiff] = field(default_factory=list)
    diff: str = ""

    def summary(self) -> str:
        where = f"step {self.step}"
        if self.reason == "missing-calls":
            return f"{where}: the replay stopped, the recording has more calls (next: {self.recorded_name})"
        if self.reason == "extra-call":
            return f"{where}: {self.kind} call {self.name!r} is beyond the end of the recording"
        if self.reason == "kind-differs":
            return f"{where}: the agent made a {self.kind} call {self.name!r}; the recording has {self.recorded_name!r}"
        changed = ", ".join(f.path for f in self.fields[:5]) or "the request"
        return f"{where}: {self.kind} call {self.name!r} differs from the recording in {changed}"


@dataclass(frozen=True, kw_only=True)
class Report:
    run_id: str
    mode: str
    steps_recorded: int
    steps_replayed: int
    steps_matched: int
    live_calls: int
    tools_sandboxed: int
    blocked_connections: int
    divergence: Divergence | None
    outcome: str  # matched | diverged | forked
    replay_run_id: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, default=str)


# --- decisions -------------------------------------------------------------------------
@dataclass(kw_only=True)
class LLMDecision:
    """How one LLM call is answered: from the recording, live, or refused."""

    kwargs: dict[str, Any]
    answer: RecordedStep | None = None
    live: bool = False
    error: AgentReplayError | None = None

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """While the client library sends the request, tell the transport what to answer."""
        token = _current_answer.set(self)
        try:
            yield
        finally:
            _current_answer.reset(token)


_current_answer: contextvars.ContextVar[LLMDecision | None] = contextvars.ContextVar(
    "agentreplay_replay_answer", default=None
)


@contextlib.contextmanager
def answering(decision: LLMDecision | None) -> Iterator[None]:
    """``decision.active()``, or nothing when recording (no decision)."""
    if decision is None:
        yield
    else:
        with decision.active():
            yield


class ReplaySession:
    """The one replay of this process: a cursor over the recording and what happened so far."""

    def __init__(self, recording: Recording, plan: Plan) -> None:
        self.recording = recording
        self.plan = plan
        self._lock = threading.Lock()
        self.cursor = 0
        self.matched = 0
        self.live_calls = 0
        self.tools_sandboxed = 0
        self.blocked = 0
        self.divergence: Divergence | None = None
        self.live_after_divergence = plan.mode is Mode.REGRESSION and plan.on_divergence == "live"
        self.forked = False

    @property
    def run_kind(self) -> str:
        return {Mode.STRICT: semconv.RUN_KIND_REPLAY, Mode.REGRESSION: semconv.RUN_KIND_REGRESSION,
                Mode.FORK: semconv.RUN_KIND_FORK}[self.plan.mode]

    # --- LLM calls -------------------------------------------------------------------
    def on_llm_call(self, provider: str, kwargs: dict[str, Any]) -> LLMDecision:
        with self._lock:
            step = self.cursor
            self.cursor += 1
            recorded = self.recording.steps[step] if step < len(self.recording.steps) else None
            if self._is_live(step):
                return self._live(kwargs, step, provider)
            name = str(kwargs.get("model", ""))
            if recorded is None:
                return self._diverge(LLMDecision(kwargs=kwargs), Divergence(
                    step=step, reason="extra-call", kind=KIND_LLM, name=name), step, provider)
            if recorded.kind != KIND_LLM:
                return self._diverge(LLMDecision(kwargs=kwargs), Divergence(
                    step=step, reason="kind-differs", kind=KIND_LLM, name=name, recorded_step=recorded.step,
                    recorded_span_id=recorded.span_id, recorded_name=recorded.span_name), step, provider)
            if self.plan.mode is Mode.FORK and step == self.plan.fork_at:
                self.forked = True
                return self._live(apply_fix(kwargs, self.plan.fix), step, provider)
            if request_fingerprint(kwargs) != recorded.fingerprint:
                return self._diverge(LLMDecision(kwargs=kwargs), self._request_divergence(
                    step, KIND_LLM, name, kwargs, recorded), step, provider)
            self.matched += 1
            return LLMDecision(kwargs=kwargs, answer=recorded)

    def _is_live(self, step: int) -> bool:
        if self.plan.mode is Mode.FORK and self.forked:
            return True
        return self.divergence is not None and self.live_after_divergence

    def _live(self, kwargs: dict[str, Any], step: int, provider: str) -> LLMDecision:
        if self.plan.mode is Mode.FORK and self.plan.fork_steps is not None and self.live_calls >= self.plan.fork_steps:
            return LLMDecision(kwargs=kwargs, error=ForkComplete(
                f"the fork made its {self.plan.fork_steps} live step(s); stopping at step {step}"))
        self.live_calls += 1
        # Forks are deterministic where the API lets them be (Anthropic's current API has no temperature).
        if self.plan.mode is Mode.FORK and "temperature" not in kwargs and provider == semconv.PROVIDER_OPENAI:
            kwargs = {**kwargs, "temperature": 0}
        return LLMDecision(kwargs=kwargs, live=True)

    def _diverge(self, decision: LLMDecision, divergence: Divergence, step: int, provider: str) -> LLMDecision:
        first = self.divergence is None
        if first:
            self.divergence = divergence
        if first and self.live_after_divergence:
            return self._live(decision.kwargs, step, provider)
        decision.error = ReplayDivergence(divergence)
        return decision

    def _request_divergence(self, step: int, kind: str, name: str, request: Mapping[str, Any],
                            recorded: RecordedStep) -> Divergence:
        fields = field_diff(recorded.request, request)
        same_kind = [s for s in self.recording.steps if s.kind == kind]
        closest = min(same_kind, key=lambda s: len(field_diff(s.request, request)), default=recorded)
        return Divergence(
            step=step, reason="request-differs", kind=kind, name=name, recorded_step=recorded.step,
            recorded_span_id=recorded.span_id, recorded_name=recorded.span_name, closest_step=closest.step,
            fields=fields, diff=text_diff(recorded.request, request),
        )

    # --- tool calls -----------------------------------------------------------------
    def on_tool_call(self, name: str, arguments: Mapping[str, Any], func: Callable[..., Any]) -> tuple[Any, str]:
        """The tool's sandboxed result and where it came from; the body never runs."""
        with self._lock:
            step = self.cursor
            self.cursor += 1
            self.tools_sandboxed += 1
            recorded = self.recording.steps[step] if step < len(self.recording.steps) else None
            sandbox_only = self._is_live(step) or (self.plan.mode is Mode.FORK and self.forked)
            if not sandbox_only:
                problem = self._tool_problem(step, name, arguments, recorded)
                if problem is not None:
                    first = self.divergence is None
                    if first:
                        self.divergence = problem
                    if not (first and self.live_after_divergence):
                        raise ReplayDivergence(problem)
                else:
                    self.matched += 1
                    assert recorded is not None
                    if recorded.failed:
                        raise recorded_failure(recorded)
                    return _decode(recorded.result), "recorded"
            return self._sandboxed(step, name, arguments, func, recorded)

    def _tool_problem(self, step: int, name: str, arguments: Mapping[str, Any],
                      recorded: RecordedStep | None) -> Divergence | None:
        if recorded is None:
            return Divergence(step=step, reason="extra-call", kind=KIND_TOOL, name=name)
        if recorded.kind != KIND_TOOL or recorded.name != name:
            return Divergence(step=step, reason="kind-differs", kind=KIND_TOOL, name=name, recorded_step=recorded.step,
                              recorded_span_id=recorded.span_id, recorded_name=recorded.span_name)
        if request_fingerprint(dict(arguments)) != recorded.fingerprint:
            return self._request_divergence(step, KIND_TOOL, name, arguments, recorded)
        return None

    def _sandboxed(self, step: int, name: str, arguments: Mapping[str, Any], func: Callable[..., Any],
                   recorded: RecordedStep | None) -> tuple[Any, str]:
        """Recorded result by position (same tool, same arguments), else by arguments, else a mock.

        A recorded result for other arguments is never returned: after a fork, the booking
        of another flight must not come back as the original booking's confirmation.
        """
        printed = request_fingerprint(dict(arguments))
        if recorded is not None and recorded.kind == KIND_TOOL and recorded.name == name \
                and recorded.fingerprint == printed:
            return _decode(recorded.result), "recorded-by-position"
        for s in self.recording.steps:
            if s.kind == KIND_TOOL and s.name == name and s.fingerprint == printed:
                return _decode(s.result), "recorded-by-arguments"
        return mock_result(func), "mock"

    # --- the end -----------------------------------------------------------------------
    def finish(self, replay_run_id: str = "") -> Report:
        with self._lock:
            if self.divergence is None and self.cursor < len(self.recording.steps) and self.plan.mode is not Mode.FORK:
                nxt = self.recording.steps[self.cursor]
                self.divergence = Divergence(step=self.cursor, reason="missing-calls", kind="", name="",
                                             recorded_step=nxt.step, recorded_span_id=nxt.span_id,
                                             recorded_name=nxt.span_name)
            outcome = "forked" if self.forked else ("diverged" if self.divergence else "matched")
            return Report(
                run_id=self.recording.run_id, mode=self.plan.mode.value, steps_recorded=len(self.recording.steps),
                steps_replayed=self.cursor, steps_matched=self.matched, live_calls=self.live_calls,
                tools_sandboxed=self.tools_sandboxed, blocked_connections=self.blocked,
                divergence=self.divergence, outcome=outcome, replay_run_id=replay_run_id,
            )


# --- fixes for a fork ----------------------------------------------------------------------
def apply_fix(kwargs: dict[str, Any], fix: Mapping[str, Any]) -> dict[str, Any]:
    """The call's kwargs with the fork's fix: system prompt, an added message, model, temperature, patch."""
    out = json.loads(json.dumps(kwargs, default=repr))
    if fix.get("system") is not None:
        _set_system(out, str(fix["system"]))
    if fix.get("message") is not None:
        if "messages" in out:
            out["messages"] = [*out["messages"], {"role": "user", "content": str(fix["message"])}]
        elif "input" in out:
            prior = out["input"] if isinstance(out["input"], list) else [{"role": "user", "content": out["input"]}]
            out["input"] = [*prior, {"role": "user", "content": str(fix["message"])}]
    if fix.get("model"):
        out["model"] = fix["model"]
    if fix.get("temperature") is not None:
        out["temperature"] = float(fix["temperature"])
    if fix.get("patch"):
        out = merge_patch(out, fix["patch"])
    return out


def _set_system(kwargs: dict[str, Any], text: str) -> None:
    if "system" in kwargs or ("messages" in kwargs and "max_tokens" in kwargs and "input" not in kwargs
                              and not any(m.get("role") == "system" for m in kwargs["messages"])):
        kwargs["system"] = text  # Anthropic
    elif "input" in kwargs:
        kwargs["instructions"] = text  # OpenAI Responses
    elif "messages" in kwargs:
        rest = [m for m in kwargs["messages"] if m.get("role") not in ("system", "developer")]
        kwargs["messages"] = [{"role": "system", "content": text}, *rest]


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# --- diffs --------------------------------------------------------------------------------
def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out or {prefix: {}}
    if isinstance(value, list):
        out = {}
        for i, v in enumerate(value):
            out.update(_flatten(v, f"{prefix}[{i}]"))
        return out or {prefix: []}
    return {prefix: value}


def field_diff(recorded: Any, replayed: Any) -> list[FieldDiff]:
    a, b = _flatten(_plain(recorded)), _flatten(_plain(replayed))
    return [FieldDiff(path=p, recorded=a.get(p), replayed=b.get(p))
            for p in sorted(set(a) | set(b)) if a.get(p) != b.get(p)]


def text_diff(recorded: Any, replayed: Any) -> str:
    left = json.dumps(_plain(recorded), indent=2, sort_keys=True, ensure_ascii=False).splitlines()
    right = json.dumps(_plain(replayed), indent=2, sort_keys=True, ensure_ascii=False).splitlines()
    return "\n".join(difflib.unified_diff(left, right, "recorded", "replayed", lineterm="", n=1))


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=repr))


def _decode(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def mock_result(func: Callable[..., Any]) -> Any:
    """An empty value of the tool's declared return type (never the real body)."""
    try:
        hint = typing.get_type_hints(func).get("return")
    except Exception:  # noqa: BLE001 - unresolvable annotations: no type to mock
        hint = None
    origin = typing.get_origin(hint) or hint
    defaults: dict[Any, Any] = {dict: {}, list: [], str: "", int: 0, float: 0.0, bool: False, tuple: ()}
    return defaults.get(origin) if origin in defaults else None


# --- the transport seam -------------------------------------------------------------------
def answer_response(step: RecordedStep, request: Any) -> Any:
    """An ``httpx2.Response`` carrying the recorded answer, for the client library to parse."""
    import httpx2

    if step.stream is not None:
        body = sse_body(step.provider, step.stream)
        headers = {"content-type": "text/event-stream"}
    else:
        body = (step.response or "{}").encode()
        headers = {"content-type": "application/json"}
    return httpx2.Response(200, headers=headers, content=body, request=request)


def sse_body(provider: str, events: list[Any]) -> bytes:
    """Server-sent events as the provider sent them: ``event:`` lines where the API has them."""
    lines = []
    for event in events:
        data = event if isinstance(event, str) else json.dumps(event, separators=(",", ":"))
        kind = _event_type(data)
        if kind and (provider == semconv.PROVIDER_ANTHROPIC or kind.startswith("response.")):
            lines.append(f"event: {kind}\ndata: {data}\n\n")
        else:
            lines.append(f"data: {data}\n\n")
    if provider == semconv.PROVIDER_OPENAI and not any(line.startswith("event: response.") for line in lines):
        lines.append("data: [DONE]\n\n")
    return "".join(lines).encode()


def _event_type(data: str) -> str | None:
    try:
        doc = json.loads(data)
    except ValueError:
        return None
    kind = doc.get("type") if isinstance(doc, dict) else None
    return kind if isinstance(kind, str) and kind != "chat.completion.chunk" else None


_session: ReplaySession | None = None
_installed = False
_originals: dict[str, Any] = {}


def active() -> ReplaySession | None:
    return _session


def _guarded_connect(original: Callable[..., Any]) -> Callable[..., Any]:
    def connect(sock: socket.socket, address: Any) -> Any:
        session = _session
        decision = _current_answer.get()
        if session is None or (decision is not None and decision.live) or _allowed(session, address):
            return original(sock, address)
        with session._lock:  # noqa: SLF001
            session.blocked += 1
        raise ReplayNetworkBlocked(f"replay blocked a network connection to {address!r}: replays make no live calls")

    return connect


def _allowed(session: ReplaySession, address: Any) -> bool:
    if isinstance(address, (str, bytes)):  # unix sockets stay local to the machine
        return True
    host, port = address[0], address[1]
    return f"{host}:{port}" in session.plan.allow or (host in ("127.0.0.1", "::1", "localhost")
                                                      and f"localhost:{port}" in session.plan.allow)


def _patched_send(original: Callable[..., Any]) -> Callable[..., Any]:
    def send(client: Any, request: Any, **kwargs: Any) -> Any:
        decision = _current_answer.get()
        if decision is not None and decision.answer is not None:
            return answer_response(decision.answer, request)
        return original(client, request, **kwargs)

    return send


def _patched_async_send(original: Callable[..., Any]) -> Callable[..., Any]:
    async def send(client: Any, request: Any, **kwargs: Any) -> Any:
        decision = _current_answer.get()
        if decision is not None and decision.answer is not None:
            return answer_response(decision.answer, request)
        return await original(client, request, **kwargs)

    return send


def install(session: ReplaySession, report_path: str | None = None) -> None:
    """Make ``session`` this process's replay: patch the transport, guard sockets, report at exit."""
    global _session, _installed
    _session = session
    if _installed:
        return
    _installed = True
    try:
        import httpx2

        _originals["send"] = httpx2.Client.send
        _originals["asend"] = httpx2.AsyncClient.send
        httpx2.Client.send = _patched_send(httpx2.Client.send)  # type: ignore[method-assign]
        httpx2.AsyncClient.send = _patched_async_send(httpx2.AsyncClient.send)  # type: ignore[method-assign]
    except ImportError:
        _log.info("agentreplay: httpx2 is not installed; LLM answers cannot be replayed through it")
    _originals["connect"] = socket.socket.connect
    _originals["connect_ex"] = socket.socket.connect_ex
    socket.socket.connect = _guarded_connect(socket.socket.connect)  # type: ignore[method-assign]
    socket.socket.connect_ex = _guarded_connect(socket.socket.connect_ex)  # type: ignore[method-assign]
    if report_path:
        atexit.register(write_report, report_path)


def uninstall() -> None:
    """Undo :func:`install` (tests)."""
    global _session, _installed
    _session = None
    if not _installed:
        return
    _installed = False
    with contextlib.suppress(ImportError):
        import httpx2

        httpx2.Client.send = _originals["send"]  # type: ignore[method-assign]
        httpx2.AsyncClient.send = _originals["asend"]  # type: ignore[method-assign]
    socket.socket.connect = _originals["connect"]  # type: ignore[method-assign]
    socket.socket.connect_ex = _originals["connect_ex"]  # type: ignore[method-assign]


def write_report(path: str) -> None:
    session = _session
    if session is None:
        return
    from agentreplay_otel import runs

    state = runs.current_run()
    run_id = state.run_id if state is not None else runs.last_run_id()
    Path(path).write_text(session.finish(replay_run_id=run_id or "").to_json())


def install_from_env(environ: Mapping[str, str] | None = None) -> ReplaySession | None:
    """Enter replay mode if ``AGENTREPLAY_REPLAY`` names a bundle (the CLI sets it)."""
    env = os.environ if environ is None else environ
    bundle_path = env.get(ENV_REPLAY)
    if not bundle_path:
        return None
    doc = json.loads(Path(bundle_path).read_text())
    plan_doc = dict(doc.get("plan", {}))
    plan_doc["mode"] = Mode(plan_doc.get("mode", "strict"))
    session = ReplaySession(Recording.from_json(json.dumps(doc["recording"])), Plan(**plan_doc))
    install(session, env.get(ENV_REPLAY_REPORT))
    return session


def bundle(recording: Recording, plan: Plan) -> str:
    """The file the CLI hands the agent's process."""
    plan_doc = asdict(plan)
    plan_doc["mode"] = plan.mode.value
    return json.dumps({"recording": json.loads(recording.to_json()), "plan": plan_doc}, ensure_ascii=False)
