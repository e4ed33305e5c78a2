"""The guard: enforcement in the agent, before a tool body or an LLM call runs.

    tool call  -> halted? (Watch)  -> local manifest check  -> Authorize (side effects,
                  RunHalted           ScopeViolation           near a cap; fail mode on
                                                               no answer)  -> body runs
    LLM call   -> halted?          -> model allowed, caps not already spent -> call
                  after the call: its cost counts against the run's caps

Every tool decision, allow or deny, is an ``agentreplay.policy.decision`` event on the
tool's span (an LLM refusal: on the run span), with the rule and the manifest hash, so
it is stored with the trace and replays. A deny halts the run in this process at once;
the collector learns of it from the span and halts it for everyone.

A replay acts on nothing (its tools are sandboxed, its answers recorded), so it is not
enforced. An agent with no manifest is not restricted, but halts still apply to it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.trace import Span

from agentreplay_otel import intercept, semconv
from agentreplay_otel import manifest as mf
from agentreplay_otel.control import DEFAULT_CONTROL, ControlClient, ControlUnavailable, Watcher
from agentreplay_otel.controltls import control_ssl_context
from agentreplay_otel.errors import ConfigurationError, RunHalted, ScopeViolation
from agentreplay_otel.identity import load_signed_manifest
from agentreplay_otel.intercept import Answer, Sandboxed, ToolCall
from agentreplay_otel.settings import Settings, env_flag

_log = logging.getLogger(__name__)
_RUN_MEMORY = 4096

SOURCE_LOCAL = "local"
SOURCE_AUTHORIZE = "authorize"
SOURCE_FAIL_OPEN = "fail_open"
SOURCE_FAIL_CLOSED = "fail_closed"
SOURCE_HALT = "halt"


@dataclass
class _RunUsage:
    tool_calls: dict[str, int] = field(default_factory=dict)
    spend_usd: float = 0.0
    spend: dict[str, float] = field(default_factory=dict)  # charged in other currencies, as charged


class Guard:
    """Holds the manifest, what each run did so far, and the halts this process knows of."""

    def __init__(
        self,
        *,
        manifest: mf.Manifest | None,
        agent_id: str | None,
        control: ControlClient | None = None,
        deadline_s: float | None = None,
        signed_manifest: Mapping[str, Any] | None = None,
    ) -> None:
        self.manifest = manifest
        self.agent_id = agent_id
        self.control = control
        self.deadline_s = (
            deadline_s if deadline_s is not None else (manifest.deadline_ms / 1000 if manifest else 0.25)
        )
        self.signed_manifest = signed_manifest
        self._lock = threading.Lock()
        self._runs: OrderedDict[str, _RunUsage] = OrderedDict()
        self._remote_halts: dict[tuple[str, str], str] = {}
        self._local_halts: dict[str, str] = {}
        self.day_spend_usd: float | None = None
        self.day_spend: dict[str, float] | None = None  # charged today in other currencies
        self.spend_multiplier = 1.0
        self.watcher: Watcher | None = None

    # --- halts -------------------------------------------------------------------------
    def halted(self, run_id: str | None) -> str | None:
        """Why this run (or this agent) is halted; None if it is not."""
        halts = self._remote_halts
        if halts:
            if self.agent_id and ("agent", self.agent_id) in halts:
                return halts[("agent", self.agent_id)]
            if run_id and ("run", run_id) in halts:
                return halts[("run", run_id)]
        if run_id and self._local_halts:
            return self._local_halts.get(run_id)
        return None

    def on_watch(self, message: Mapping[str, Any]) -> None:
        kind = message.get("type")
        if kind == "snapshot":
            self._remote_halts = {
                (h["scope"], h["target"]): h.get("reason", "") for h in message.get("halts", [])
            }
        elif kind == "halt":
            halts = dict(self._remote_halts)
            halts[(message["scope"], message["target"])] = message.get("reason", "")
            self._remote_halts = halts
        elif kind == "resume":
            halts = dict(self._remote_halts)
            halts.pop((message["scope"], message["target"]), None)
            self._remote_halts = halts
            if message.get("scope") == "run":
                self._local_halts.pop(message["target"], None)
            elif message.get("scope") == "agent":
                self._local_halts.clear()

    def halt_locally(self, run_id: str, reason: str) -> None:
        self._local_halts[run_id] = reason

    # --- usage -------------------------------------------------------------------------
    def _usage(self, run_id: str | None) -> mf.Usage:
        with self._lock:
            run = self._runs.get(run_id) if run_id else None
            calls = dict(run.tool_calls) if run else {}
            spend = run.spend_usd if run else 0.0
            in_currencies = dict(run.spend) if run else {}
            today = None if self.day_spend is None else dict(self.day_spend)
        return mf.Usage(tool_calls=calls, run_spend_usd=spend, day_spend_usd=self.day_spend_usd,
                        run_spend=in_currencies, day_spend=today)

    def _run(self, run_id: str) -> _RunUsage:
        run = self._runs.get(run_id)
        if run is None:
            run = self._runs[run_id] = _RunUsage()
            while len(self._runs) > _RUN_MEMORY:
                self._runs.popitem(last=False)
        return run

    def _count(self, run_id: str, tool: str) -> None:
        with self._lock:
            run = self._run(run_id)
            run.tool_calls[tool] = run.tool_calls.get(tool, 0) + 1

    def add_cost(self, run_id: str, cost_usd: float, currency: str = mf.USD) -> None:
        """A finished call's cost (LLM tokens, a tool's price) in ``currency``, kept as charged: the
        caps count it as the manifest says (its caps in that currency, its rates)."""
        if cost_usd <= 0:
            return
        m = self.manifest
        with self._lock:
            run = self._run(run_id)
            if currency == mf.USD:
                run.spend_usd += cost_usd
                if self.day_spend_usd is not None:
                    self.day_spend_usd += cost_usd
            else:
                run.spend[currency] = run.spend.get(currency, 0.0) + cost_usd
                if self.day_spend is not None:
                    self.day_spend[currency] = self.day_spend.get(currency, 0.0) + cost_usd
            spend = run.spend_usd
            in_currencies = dict(run.spend)
            today = None if self.day_spend is None else dict(self.day_spend)
        if m is not None:
            verdict = mf.evaluate_spend(
                m,
                mf.Usage(run_spend_usd=spend, day_spend_usd=self.day_spend_usd,
                         run_spend=in_currencies, day_spend=today),
                spend_multiplier=self.spend_multiplier,
            )
            if not verdict.allowed:
                self.halt_locally(run_id, f"{verdict.rule}: {verdict.detail}")

    # --- tool calls --------------------------------------------------------------------
    def before_tool(
        self,
        *,
        span: Span,
        tool: str,
        side_effect: bool,
        arguments: Mapping[str, Any],
        cost_usd: float | None,
        charge: mf.Charge | None = None,
    ) -> None:
        """Raise RunHalted or ScopeViolation (after recording why on ``span``) or return: may run.
        ``charge``: the call's cost in its currency (``cost_usd`` is the same in US dollars only)."""
        run_id = format(span.get_span_context().trace_id, "032x")
        reason = self.halted(run_id)
        m = self.manifest
        digest = m.sha256 if m else ""
        if reason is not None:
            decision = mf.Decision(allowed=False, rule=mf.RULE_HALTED, manifest_sha256=digest, detail=reason)
            _event(span, decision, SOURCE_HALT, tool)
            span.set_attribute(semconv.HALTED, True)
            raise RunHalted(f"run {run_id} is halted: {reason}")
        if m is None:
            return
        usage = self._usage(run_id)
        decision = mf.evaluate_tool(
            m,
            tool=tool,
            arguments=arguments,
            usage=usage,
            cost_usd=cost_usd,
            charge=charge,
            spend_multiplier=self.spend_multiplier,
        )
        source = SOURCE_LOCAL
        if decision.allowed and mf.needs_authorization(
            m,
            tool=tool,
            side_effect=side_effect,
            usage=usage,
            cost_usd=cost_usd,
            charge=charge,
            spend_multiplier=self.spend_multiplier,
        ):
            decision, source = self._authorize(
                {
                    "kind": "tool",
                    "tool": tool,
                    "side_effect": side_effect,
                    "arguments": dict(arguments),
                    "cost_usd": cost_usd,
                    **({"cost_amount": charge.amount, "cost_currency": charge.currency} if charge else {}),
                    "run_id": run_id,
                    "tool_calls": usage.tool_calls.get(tool, 0),
                    "run_spend_usd": usage.run_spend_usd,
                    **({"run_spend": dict(usage.run_spend)} if usage.run_spend else {}),
                }
            )
        _event(span, decision, source, tool)
        if decision.allowed:
            self._count(run_id, tool)
            return
        if decision.rule == mf.RULE_HALTED:
            span.set_attribute(semconv.HALTED, True)
            raise RunHalted(f"run {run_id} is halted: {decision.detail}")
        if source != SOURCE_FAIL_CLOSED:  # an unreachable collector refuses a call, it does not end the run
            self.halt_locally(run_id, f"{decision.rule}: {decision.detail}")
        raise ScopeViolation(f"{tool} refused by {decision.rule}: {decision.detail} (manifest {digest[:12]})")

    # --- LLM calls ---------------------------------------------------------------------
    def before_llm(self, *, run_span: Span | None, model: str | None) -> None:
        run_id = format(run_span.get_span_context().trace_id, "032x") if run_span is not None else None
        reason = self.halted(run_id)
        m = self.manifest
        if reason is not None:
            if run_span is not None:
                decision = mf.Decision(
                    allowed=False, rule=mf.RULE_HALTED, manifest_sha256=m.sha256 if m else "", detail=reason
                )
                _event(run_span, decision, SOURCE_HALT, None)
            raise RunHalted(f"run {run_id or '(none yet)'} is halted: {reason}")
        if m is None:
            return
        usage = self._usage(run_id)
        decision = mf.evaluate_llm(m, model=model, usage=usage, spend_multiplier=self.spend_multiplier)
        source = SOURCE_LOCAL
        if decision.allowed and mf.near_cap(m, usage, spend_multiplier=self.spend_multiplier):
            decision, source = self._authorize(
                {"kind": "llm", "model": model, "run_id": run_id, "run_spend_usd": usage.run_spend_usd}
            )
        if decision.allowed:
            return  # allowed LLM calls are not events: the call's own span is the record
        if run_span is not None:
            _event(run_span, decision, source, None)
        if decision.rule == mf.RULE_HALTED:
            raise RunHalted(f"run {run_id} is halted: {decision.detail}")
        if run_id is not None and source != SOURCE_FAIL_CLOSED:
            self.halt_locally(run_id, f"{decision.rule}: {decision.detail}")
        raise ScopeViolation(f"LLM call refused by {decision.rule}: {decision.detail}")

    # --- Authorize ---------------------------------------------------------------------
    def _authorize(self, request: dict[str, Any]) -> tuple[mf.Decision, str]:
        m = self.manifest
        assert m is not None
        request.update(agent_id=self.agent_id, manifest_sha256=m.sha256)
        try:
            if self.control is None:
                raise ControlUnavailable("no control endpoint configured")
            answer = self.control.authorize(request, timeout_s=self.deadline_s)
            if answer.get("error") == "manifest_unknown" and self.signed_manifest is not None:
                self._register()  # a collector that has not seen this manifest yet (or restarted)
                answer = self.control.authorize(request, timeout_s=self.deadline_s)
            if "decision" not in answer:
                raise ControlUnavailable(str(answer.get("error", "no decision in the answer")))
        except ControlUnavailable as exc:
            if m.fail_open:
                return mf.Decision(
                    allowed=True,
                    rule=mf.RULE_AUTHORIZE_UNAVAILABLE,
                    manifest_sha256=m.sha256,
                    detail=f"fail-open: {exc}",
                ), SOURCE_FAIL_OPEN
            return mf.Decision(
                allowed=False,
                rule=mf.RULE_AUTHORIZE_UNAVAILABLE,
                manifest_sha256=m.sha256,
                detail=f"fail-closed: {exc}",
            ), SOURCE_FAIL_CLOSED
        if answer.get("day_spend_usd") is not None:
            self.day_spend_usd = float(answer["day_spend_usd"])
        if isinstance(answer.get("day_spend"), dict):
            self.day_spend = {str(k): float(v) for k, v in answer["day_spend"].items()}
        if answer.get("spend_multiplier") is not None:
            self.spend_multiplier = float(answer["spend_multiplier"])
        return mf.Decision.from_json(answer), SOURCE_AUTHORIZE

    # --- lifecycle ---------------------------------------------------------------------
    def start_watch(self) -> None:
        if self.control is None or not self.agent_id or self.watcher is not None:
            return
        self.watcher = Watcher(
            self.control, self.agent_id, self.on_watch, before_connect=self._register
        ).start()

    def _register(self) -> None:
        if self.signed_manifest is not None and self.control is not None:
            answer = self.control.post("/v1/manifests", self.signed_manifest, timeout_s=2.0)
            if answer.get("error"):
                _log.warning("agentreplay: the collector refused this agent's manifest: %s", answer["error"])

    def stop(self) -> None:
        if self.watcher is not None:
            self.watcher.stop()
        if self.control is not None:
            self.control.close()


def _event(span: Span, decision: mf.Decision, source: str, tool: str | None) -> None:
    extra: dict[str, Any] = {semconv.POLICY_SOURCE: source}
    if tool is not None:
        extra[semconv.GEN_AI_TOOL_NAME] = tool
    try:
        span.add_event(semconv.EVENT_POLICY_DECISION, decision.event_attributes(**extra))
    except Exception:  # noqa: BLE001 - recording never breaks the agent; the decision still stands
        _log.exception("agentreplay: could not record a policy decision")


class GuardInterceptor:
    """The guard as the process's :class:`~agentreplay_otel.intercept.Interceptor`."""

    acts = True
    run_marks = intercept.NO_MARKS
    reads_request_body = False  # on_request ignores the body: the transport need not parse it
    _SEND = Answer()

    def __init__(self, guard: Guard) -> None:
        self.guard = guard

    def before_llm(self, run_span: Span, model: str | None) -> None:
        self.guard.before_llm(run_span=run_span, model=model)

    def on_request(self, provider: str, name: str, body: dict[str, Any], step: int | None) -> Answer:
        return self._SEND

    def before_tool(self, call: ToolCall) -> Sandboxed | None:
        self.guard.before_tool(span=call.span, tool=call.name, side_effect=call.side_effect,
                               arguments=call.arguments, cost_usd=call.cost_usd,
                               charge=None if call.cost is None else mf.Charge(call.cost, call.currency))
        return None

    def charge(self, trace_id: str, cost_usd: float) -> None:
        self.guard.add_cost(trace_id, cost_usd)

    def charge_in(self, trace_id: str, amount: float, currency: str) -> None:
        """A charge in any currency, counted as the manifest says (its caps in that currency, its rate)."""
        self.guard.add_cost(trace_id, amount, currency)


# --- the process's guard -----------------------------------------------------------------
_current: Guard | None = None


def current() -> Guard | None:
    return _current


def install(guard: Guard | None) -> Guard | None:
    """Make ``guard`` this process's guard and interceptor (None: no enforcement); returns the
    previous one."""
    global _current
    previous, _current = _current, guard
    intercept.install(GuardInterceptor(guard) if guard is not None else None)
    return previous


def from_settings(current_settings: Settings, environ: Mapping[str, str] | None = None) -> Guard | None:
    """The guard the environment asks for, or None when ``AGENTREPLAY_GUARD=off``.

    A manifest whose signature cannot be checked (no org public key) refuses to start:
    enforcing an unverified manifest would let anyone who can set an env var pick the rules.
    """
    env = os.environ if environ is None else environ
    if not env_flag(env, semconv.ENV_GUARD, default=True):
        return None
    creds = current_settings.credentials
    signed = None
    parsed = None
    if creds.manifest is not None:
        if not env.get(semconv.ENV_ORG_PUBLIC_KEY):
            raise ConfigurationError(
                f"{semconv.ENV_MANIFEST} is set but {semconv.ENV_ORG_PUBLIC_KEY} is not: "
                "the manifest's signature cannot be checked, so the agent does not start"
            )
        parsed = mf.parse_manifest(creds.manifest)
        signed = load_signed_manifest(env[semconv.ENV_MANIFEST])
    url = env.get(semconv.ENV_COLLECTOR) or DEFAULT_CONTROL
    deadline = env.get(semconv.ENV_AUTHORIZE_DEADLINE_MS)
    try:
        deadline_s = int(deadline) / 1000 if deadline else None
    except ValueError as exc:
        raise ConfigurationError(
            f"{semconv.ENV_AUTHORIZE_DEADLINE_MS}={deadline!r} is not an integer"
        ) from exc
    return Guard(
        manifest=parsed,
        agent_id=creds.agent_id,
        control=ControlClient(  # https: the CA the environment names (controltls), checked here, at start
            url, prover=creds.prover, tls=control_ssl_context(env) if url.startswith("https://") else None
        ),
        deadline_s=deadline_s,
        signed_manifest=signed,
    )


def start(guard: Guard | None) -> Guard | None:
    """Make ``guard`` this process's guard (stopping the one before) and start watching for halts.

    The launcher builds the guard with :func:`from_settings` before it starts anything, so a
    configuration that does not verify stops the agent before a span or a watch exists.
    """
    previous = install(guard)
    if previous is not None:
        previous.stop()
    if guard is not None:
        guard.start_watch()
    return guard


def install_from_env(current_settings: Settings, environ: Mapping[str, str] | None = None) -> Guard | None:
    """Build, install and start watching for halts (embedders; the launcher goes through the distro)."""
    return start(from_settings(current_settings, environ))


def wait_for_watch(timeout_s: float = 5.0) -> bool:
    """Block until this process's Watch stream is connected (tests, and agents that must not
    start before they can be halted)."""
    guard = _current
    if guard is None or guard.watcher is None:
        return False
    return guard.watcher.connected.wait(timeout_s)
