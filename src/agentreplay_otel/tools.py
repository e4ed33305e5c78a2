"""Tool calls: each one an ``execute_tool`` span, enforced when recorded, sandboxed in a replay.

``@agentreplay_otel.tool`` records a function's calls; it is usable bare or with options, on
sync and async functions::

    @tool
    def search(query: str) -> list[str]: ...

    @tool(side_effect=True, cost=lambda seats: 120.0 * seats)
    async def book_flight(flight: str, seats: int) -> dict: ...

    @tool(side_effect=True, cost=lambda amount, order: amount, currency="EUR")
    def issue_refund(order: str, amount: float) -> dict: ...

``cost`` is what one call charges (money the call moves), in ``currency`` (ISO 4217, US dollars
by default), recorded on the span as ``agentreplay.cost.amount`` and ``agentreplay.cost.currency``;
a charge in US dollars is ``agentreplay.cost.usd`` too. A charge counts toward the manifest's caps in
its currency (``spend.per_run: {"EUR": 600}``), and toward its USD caps at the rate in ``spend.rates``;
one no cap counts is refused under ``fail_mode: closed`` (``spend.currency``; docs/control.md).

Arguments and result are recorded as JSON; the span is current while the body runs, so
LLM calls made inside a tool are its children. On a method, ``self``/``cls`` and what a framework
injects (a run context, a kernel) are the tool's owner, recorded by type and never matched
(:func:`owner_parameters`); an argument held only as a repr with an address is recorded by its type
(:func:`recorded_arguments`). The result keeps a type tag beside its JSON, so a replay hands back a
model, a date or an artifact rather than its JSON (:func:`agentreplay_otel.codec.typed`).

Frameworks that run tools themselves (the LangChain instrumentor) record them through the
same path, :func:`call_tool` / :func:`acall_tool`: one span, one step number, the guard's
verdict before the body, and in a replay the recorded answer with the body never running.
A function decorated with ``@tool`` that such a framework runs is recorded once, by the
framework's instrumentor, which knows the call's id (:func:`recorded_by_caller`).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import logging
import re
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeVar, overload

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from agentreplay_otel import codec, intercept, semconv, settings
from agentreplay_otel.content import to_json
from agentreplay_otel.errors import ReplayedToolError
from agentreplay_otel.runs import start_step_span

_log = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")
Cost = float | Callable[..., float] | None


@dataclass(frozen=True, kw_only=True)
class ToolSpec:
    """What the decorator knows about a tool: its name, whether it acts on the world, its cost."""

    name: str
    side_effect: bool = False
    cost: Cost = None
    currency: str = semconv.CURRENCY_USD  # ISO 4217: what ``cost`` is counted in
    function: str = ""
    description: str = ""  # gen_ai.tool.description: the docstring's first line, or the framework's


@dataclass(frozen=True, kw_only=True)
class ToolInvocation:
    """One call of a tool: which tool, its arguments by name, and the id the model gave the call."""

    spec: ToolSpec
    arguments: dict[str, Any]
    func: Callable[..., Any]  # the body; a replay with nothing recorded mocks its return type
    call_id: str | None = None
    owners: dict[str, Any] = field(default_factory=dict)  # self, cls, injected objects: recorded by type only


@dataclass(frozen=True, kw_only=True)
class Replayed:
    """A replay's answer to a tool call: the recorded result, or the recorded failure.

    The failure is handed to the caller rather than raised at once, so a framework can run its
    own machinery around the body (argument validation first) exactly as when it was recorded.
    """

    value: Any = None
    failure: BaseException | None = None

    def result(self) -> Any:
        if self.failure is not None:
            raise self.failure
        return self.value


def _recorded_as_is(result: Any) -> Any:
    return result


def _replayed_result(answer: Replayed) -> Any:
    return answer.result()


async def _areplayed_result(answer: Replayed) -> Any:
    return answer.result()


def call_tool(
    call: ToolInvocation,
    body: Callable[[], T],
    *,
    replayed: Callable[[Replayed], T] = _replayed_result,
    recorded: Callable[[T], Any] = _recorded_as_is,
    tracer: trace.Tracer | None = None,
) -> T:
    """Run one tool call as a step: ``body()`` when recording, ``replayed(answer)`` in a replay.

    ``recorded(result)`` is what the span keeps as the result (and what a replay answers with).
    """
    with _Step(call, recorded, tracer) as step:
        answer = _decide(call, step.span)
        step.result = body() if answer is None else replayed(answer)
    return step.result


async def acall_tool(
    call: ToolInvocation,
    body: Callable[[], Awaitable[T]],
    *,
    replayed: Callable[[Replayed], Awaitable[T]] = _areplayed_result,
    recorded: Callable[[T], Any] = _recorded_as_is,
    tracer: trace.Tracer | None = None,
) -> T:
    """:func:`call_tool` for a coroutine body."""
    with _Step(call, recorded, tracer) as step:
        answer = _decide(call, step.span)
        step.result = await (body() if answer is None else replayed(answer))
    return step.result


class _Step:
    """One tool call's span: current while the call runs, ended once with its result or failure."""

    def __init__(self, call: ToolInvocation, recorded: Callable[[Any], Any], tracer: trace.Tracer | None) -> None:
        self.call = call
        self.recorded = recorded
        self.result: Any = None
        self.span = _start(call, tracer)
        self._token: object | None = None

    def __enter__(self) -> _Step:
        self._token = otel_context.attach(trace.set_span_in_context(self.span))
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        otel_context.detach(self._token)  # type: ignore[arg-type]
        if exc is not None:
            _fail(self.span, exc)
        else:
            _finish(self.span, self.call, self.recorded, self.result)


# The guard and the replay are consulted in these two functions only.
def _decide(call: ToolInvocation, span: Span) -> Replayed | None:
    """Before the body, the interceptor's verdict: the guard raises ScopeViolation / RunHalted or
    lets the body run (None); a replay answers in its place (the body never runs)."""
    interceptor = intercept.current()
    cost = _cost(call.spec.cost, call.arguments, call.owners) if interceptor.acts else None
    in_usd = call.spec.currency == semconv.CURRENCY_USD
    try:
        sandboxed = interceptor.before_tool(intercept.ToolCall(
            name=call.spec.name, span=span, arguments=call.arguments, side_effect=call.spec.side_effect,
            cost_usd=cost if in_usd else None, func=call.func, cost=cost, currency=call.spec.currency))
    except ReplayedToolError as exc:  # failed when recorded: the caller raises it where the body was
        return Replayed(failure=exc)
    return None if sandboxed is None else Replayed(value=sandboxed.value)


def _charge(call: ToolInvocation, span: Span) -> None:
    """The call's charge on its span, in its currency, and against the run's caps (in the currency's
    own caps, or at the manifest's rate toward its USD caps); a sandboxed call (a replay) cost nothing."""
    interceptor = intercept.current()
    if not interceptor.acts:
        return
    cost = _cost(call.spec.cost, call.arguments, call.owners)
    if cost is None:
        return
    span.set_attribute(semconv.COST_AMOUNT, cost)
    span.set_attribute(semconv.COST_CURRENCY, call.spec.currency)
    trace_id = format(span.get_span_context().trace_id, "032x")
    if call.spec.currency == semconv.CURRENCY_USD:
        span.set_attribute(semconv.COST_USD, cost)
        interceptor.charge(trace_id, cost)
    elif (charge_in := getattr(interceptor, "charge_in", None)) is not None:  # the guard: counted by the manifest
        charge_in(trace_id, cost, call.spec.currency)


def _start(call: ToolInvocation, tracer: trace.Tracer | None) -> Span:
    spec = call.spec
    attributes: dict[str, Any] = {
        semconv.GEN_AI_OPERATION_NAME: semconv.OP_EXECUTE_TOOL,
        semconv.GEN_AI_TOOL_NAME: spec.name,
        semconv.GEN_AI_TOOL_TYPE: semconv.TOOL_TYPE_FUNCTION,  # run by the agent's own code
        semconv.TOOL_SIDE_EFFECT: spec.side_effect,
        semconv.TOOL_FUNCTION: spec.function,
    }
    if spec.description:
        attributes[semconv.GEN_AI_TOOL_DESCRIPTION] = spec.description
    if call.call_id:
        attributes[semconv.GEN_AI_TOOL_CALL_ID] = call.call_id
    if call.owners:
        attributes[semconv.TOOL_OWNER] = json.dumps({k: _type_name(v) for k, v in call.owners.items()})
    if settings.current().capture_content:
        text, addressed = recorded_arguments(call.arguments)
        attributes[semconv.GEN_AI_TOOL_CALL_ARGUMENTS] = text
        if addressed:
            _say_once(spec.name, "arguments", f"agentreplay: tool {spec.name!r}: argument(s) {', '.join(addressed)} "
                      "recorded only as a repr holding a memory address; a replay matches them by type")
    return start_step_span(f"{semconv.OP_EXECUTE_TOOL} {spec.name}", kind=SpanKind.INTERNAL,
                           attributes=attributes, tracer=tracer)


def _finish(span: Span, call: ToolInvocation, recorded: Callable[[Any], Any], result: Any) -> None:
    try:
        if settings.current().capture_content:
            _record_result(span, call.spec.name, recorded(result))
        _charge(call, span)
    except Exception:  # recording must never break the agent
        _log.exception("agentreplay: could not record the result of tool %r", call.spec.name)
    finally:
        span.end()


def _record_result(span: Span, tool: str, result: Any) -> None:
    """The result as JSON, and its type tag when it is more than JSON (what a replay rebuilds it as);
    a type a replay cannot rebuild is said once (one line on stderr)."""
    typed = codec.typed(result)
    span.set_attribute(semconv.GEN_AI_TOOL_CALL_RESULT, to_json(typed.plain))
    if typed.tag is not None:
        span.set_attribute(semconv.TOOL_RESULT_TYPE, json.dumps(typed.tag, separators=(",", ":")))
    for path in typed.opaque:
        _say_once(tool, path, f"agentreplay: tool {tool!r} returns {path}, which a replay cannot rebuild "
                  "(not an importable pydantic model, dataclass, attrs class, enum or named tuple): "
                  "a replay returns its recorded JSON in its place")


# Said once per process: a tool's arguments or result types that a replay cannot match or rebuild.
_said: set[tuple[str, str]] = set()
_said_lock = threading.Lock()


def _say_once(tool: str, what: str, line: str) -> None:
    with _said_lock:
        if (tool, what) in _said:
            return
        _said.add((tool, what))
    sys.stderr.write(line + "\n")


def _fail(span: Span, exc: BaseException) -> None:
    span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
    span.set_attribute(semconv.ERROR_TYPE, type(exc).__qualname__)
    span.end()


# --- one span per call, whoever records it ------------------------------------------------
_recorded_outside: ContextVar[Callable[..., Any] | None] = ContextVar("agentreplay_tool_recorded_outside",
                                                                      default=None)


@contextlib.contextmanager
def recorded_by_caller(func: Callable[..., Any] | None) -> Iterator[None]:
    """While a framework records a call of ``func`` itself, an ``@tool`` ``func`` adds no span of its own."""
    token = _recorded_outside.set(func)
    try:
        yield
    finally:
        _recorded_outside.reset(token)


def spec_of(func: Callable[..., Any] | None) -> ToolSpec | None:
    """The options ``@tool`` gave ``func``, or None when it is not decorated."""
    return getattr(func, "__agentreplay_tool__", None)


# --- the decorator ----------------------------------------------------------------------------
@overload
def tool(fn: F) -> F: ...
@overload
def tool(*, name: str | None = None, side_effect: bool = False, cost: Cost = None,
         currency: str = semconv.CURRENCY_USD) -> Callable[[F], F]: ...


def tool(
    fn: F | None = None, *, name: str | None = None, side_effect: bool = False, cost: Cost = None,
    currency: str = semconv.CURRENCY_USD,
) -> F | Callable[[F], F]:
    """Record each call of the decorated function as a tool call; ``cost`` is counted in ``currency``."""
    code = currency_code(currency)

    def decorate(func: F) -> F:
        if isinstance(func, (classmethod, staticmethod)):  # @tool above @classmethod: wrap the function inside
            return type(func)(decorate(func.__func__))  # type: ignore[arg-type,return-value]
        spec = ToolSpec(
            name=name or func.__name__,
            side_effect=side_effect,
            cost=cost,
            currency=code,
            function=f"{func.__module__}.{func.__qualname__}",
            description=_first_line(inspect.getdoc(func)),
        )
        return _wrap(func, spec)

    return decorate(fn) if fn is not None else decorate


def _wrap(func: F, spec: ToolSpec) -> F:
    signature = inspect.signature(func)
    owners = owner_parameters(signature)

    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            if _recorded_outside.get() is async_wrapper:
                with recorded_by_caller(None):
                    return await func(*args, **kwargs)
            call = _invocation(spec, func, signature, owners, args, kwargs)
            return await acall_tool(call, lambda: func(*args, **kwargs))

        async_wrapper.__agentreplay_tool__ = spec  # type: ignore[attr-defined]
        return async_wrapper  # type: ignore[return-value]

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _recorded_outside.get() is wrapper:
            with recorded_by_caller(None):
                return func(*args, **kwargs)
        call = _invocation(spec, func, signature, owners, args, kwargs)
        return call_tool(call, lambda: func(*args, **kwargs))

    wrapper.__agentreplay_tool__ = spec  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


def currency_code(currency: str) -> str:
    """An ISO 4217 code (``"eur"`` -> ``"EUR"``); a ValueError, at decoration, for anything else."""
    code = currency.strip().upper() if isinstance(currency, str) else ""
    if len(code) != 3 or not code.isascii() or not code.isalpha():
        raise ValueError(f"a tool's currency is a three-letter ISO 4217 code such as USD or EUR, not {currency!r}")
    return code


def _first_line(text: str | None) -> str:
    """A description's first line (a docstring's summary), or empty."""
    return text.strip().split("\n", 1)[0].strip() if text else ""


def _invocation(spec: ToolSpec, func: Callable[..., Any], signature: inspect.Signature, owners: frozenset[str],
                args: tuple, kwargs: dict) -> ToolInvocation:
    arguments = _arguments(signature, args, kwargs)
    found = {k: v for k, v in arguments.items() if k in owners or _injected_value(v)}
    return ToolInvocation(spec=spec, arguments={k: v for k, v in arguments.items() if k not in found}, func=func,
                          owners=found)


def _arguments(signature: inspect.Signature, args: tuple, kwargs: dict) -> dict[str, Any]:
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:  # the call itself will raise the real error
        return {"args": list(args), "kwargs": dict(kwargs)}
    bound.apply_defaults()
    return dict(bound.arguments)


# --- what a tool runs on, not what it is asked --------------------------------------------------
# A method's self or cls, and what a framework hands a tool besides the model's arguments (a run
# context, a kernel, callbacks), are the tool's *owner*: recorded by type (semconv.TOOL_OWNER), never
# matched by value, since their value (an address, a live connection) differs in every process.
_OWNER_NAMES = frozenset({"self", "cls"})  # the first parameter of a method or classmethod
# Annotations that name an injected object, wherever the framework defines it (pydantic-ai, the OpenAI
# Agents SDK, Semantic Kernel, LangChain / LangGraph).
_INJECTED_ANNOTATIONS = frozenset({
    "RunContext", "RunContextWrapper", "ToolContext", "Kernel", "KernelArguments", "PromptExecutionSettings",
    "AIServiceClientBase", "RunnableConfig", "CallbackManagerForToolRun", "AsyncCallbackManagerForToolRun",
    "ToolRuntime", "InjectedToolArg", "InjectedState", "InjectedStore",
})
# Classes known by their package too, where the name alone is too common (MCP's and FastMCP's Context).
_INJECTED_CLASSES = frozenset({
    ("mcp", "Context"), ("fastmcp", "Context"), ("pydantic_ai", "RunContext"), ("agents", "RunContextWrapper"),
    ("agents", "ToolContext"), ("semantic_kernel", "Kernel"), ("semantic_kernel", "KernelArguments"),
    ("langchain_core", "BaseCallbackManager"), ("langgraph", "ToolRuntime"),
})
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def owner_parameters(signature: inspect.Signature) -> frozenset[str]:
    """The parameters that are the tool's owner by their name or annotation (``self``, ``cls`` first;
    ``ctx: RunContext[Deps]``, ``kernel: Kernel``, ``config: RunnableConfig`` anywhere)."""
    found = set()
    for index, p in enumerate(signature.parameters.values()):
        if index == 0 and p.name in _OWNER_NAMES:
            found.add(p.name)
        elif p.annotation is not inspect.Parameter.empty and _names_injected(p.annotation):
            found.add(p.name)
    return frozenset(found)


def _names_injected(annotation: Any) -> bool:
    text = annotation if isinstance(annotation, str) else repr(annotation)
    return not _INJECTED_ANNOTATIONS.isdisjoint(_WORD.findall(text))


def _injected_value(value: Any) -> bool:
    """Whether ``value`` is an object a framework injects (by its class's package and name)."""
    kind = type(value)
    if kind in (str, int, float, bool, list, dict, type(None)):
        return False
    return any((c.__module__.partition(".")[0], c.__name__) in _INJECTED_CLASSES for c in kind.__mro__)


def _type_name(value: Any) -> str:
    """An owner as recorded: its class (``module:QualName``), the class itself for ``cls``."""
    return codec.class_path(value if isinstance(value, type) else type(value))


_ADDRESS = re.compile(r"^<(.*?)\s+at\s+0x[0-9a-fA-F]+>$", re.DOTALL)


def recorded_arguments(arguments: Mapping[str, Any]) -> tuple[str, list[str]]:
    """A call's arguments as recorded (JSON), and the names of those held only as a repr with a memory
    address (``<Client object at 0x7f...>``): each is recorded by its type (``<module:Client>``), so the
    same call in another process (another address) records the same text and a replay matches it."""
    addressed: list[str] = []
    plain = {name: _unaddressed(value, name, addressed) for name, value in arguments.items()}
    text = to_json(plain)
    if " at 0x" in text:  # an address deeper inside (a repr within a model or a container's items)
        stripped = _strip_addresses(json.loads(text), addressed, "")
        text = to_json(stripped)
    return text, list(dict.fromkeys(addressed))


def arguments_as_recorded(arguments: Mapping[str, Any]) -> Any:
    """The arguments as the recording holds them (decoded): what a replay matches a call by."""
    return json.loads(recorded_arguments(arguments)[0])


def _unaddressed(value: Any, name: str, addressed: list[str]) -> Any:
    kind = type(value)
    if kind in (str, int, float, bool, type(None)):
        return value
    if kind in (list, tuple):
        return [_unaddressed(v, name, addressed) for v in value]
    if kind is dict:
        return {k: _unaddressed(v, name, addressed) for k, v in value.items()}
    if codec.class_kind(kind) is not None or callable(getattr(value, "model_dump", None)) \
            or hasattr(value, "isoformat") or isinstance(value, (set, frozenset, bytes)):
        return value  # the content encoder writes its fields or text
    if _ADDRESS.match(repr(value)):
        addressed.append(name)
        return f"<{codec.class_path(kind)}>"
    return value


def _strip_addresses(value: Any, addressed: list[str], name: str) -> Any:
    if isinstance(value, str):
        found = _ADDRESS.match(value)
        if found is None:
            return value
        addressed.append(name or "?")
        return f"<{found.group(1)}>"
    if isinstance(value, list):
        return [_strip_addresses(v, addressed, name) for v in value]
    if isinstance(value, dict):
        return {k: _strip_addresses(v, addressed, name or k) for k, v in value.items()}
    return value


def _cost(cost: Cost, arguments: dict[str, Any], owners: Mapping[str, Any] | None = None) -> float | None:
    """What one call charges: ``cost`` itself, or ``cost(**arguments)`` (with ``self`` too for a cost
    function that names it)."""
    if cost is None:
        return None
    if callable(cost):
        try:
            return float(cost(**_cost_arguments(cost, arguments, owners or {})))
        except Exception:  # noqa: BLE001 - a faulty cost function must not break the tool
            _log.exception("agentreplay: cost function of a tool failed")
            return None
    return float(cost)


def _cost_arguments(cost: Callable[..., float], arguments: dict[str, Any], owners: Mapping[str, Any]) -> dict[str, Any]:
    if not owners:
        return arguments
    try:
        named = inspect.signature(cost).parameters
    except (TypeError, ValueError):
        return arguments
    return {**{k: v for k, v in owners.items() if k in named}, **arguments}
