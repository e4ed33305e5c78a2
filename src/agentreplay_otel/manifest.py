"""Scope manifests and the one evaluator that both enforcement points share.

The SDK's guard (before a tool runs) and the collector's ``agentreplay_scope`` processor
(on every received span) call the same pure functions here, so the agent and the
collector cannot disagree about what a manifest allows. Nothing here does I/O or reads
a clock: the caller supplies what has happened so far as a :class:`Usage`.

Every answer is a :class:`Decision`: allowed or not, the rule that decided, and the hash
of the manifest it was decided under, so a decision can be audited and replayed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from agentreplay_otel import semconv
from agentreplay_otel.errors import ManifestError
from agentreplay_otel.identity import manifest_sha256

FAIL_CLOSED: Final = "closed"
FAIL_OPEN: Final = "open"

ALLOW: Final = "allow"
DENY: Final = "deny"

# Rule names (the ``rule`` of a decision); argument rules are ``tool.arg.<name>.<check>``.
RULE_TOOL_ALLOWED: Final = "tool.allowed"
RULE_TOOL_UNLISTED: Final = "tool.unlisted"
RULE_MAX_PER_RUN: Final = "tool.max_per_run"
RULE_MAX_COST: Final = "tool.max_cost_usd"
RULE_LLM_ALLOWED: Final = "llm.allowed"
RULE_MODEL_UNLISTED: Final = "llm.model_unlisted"
RULE_SPEND_RUN: Final = "spend.per_run"
RULE_SPEND_DAY: Final = "spend.per_day"
RULE_NO_MANIFEST: Final = "manifest.none"
RULE_HALTED: Final = "halted"
RULE_AUTHORIZE_UNAVAILABLE: Final = "authorize.unavailable"


@dataclass(frozen=True, kw_only=True)
class ArgRule:
    """Limits on one argument: a value outside any of them is a violation."""

    enum: tuple[Any, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    pattern: re.Pattern[str] | None = None
    max_length: int | None = None
    required: bool = False


@dataclass(frozen=True, kw_only=True)
class ToolRule:
    name: str
    side_effect: bool = False
    authorize: bool | None = None  # None: decided by side_effect and the manifest's authorization block
    max_per_run: int | None = None
    max_cost_usd: float | None = None
    args: Mapping[str, ArgRule] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Manifest:
    """A parsed, validated manifest body (the signature is checked before parsing, in identity)."""

    sha256: str
    agent: str | None = None
    tools: Mapping[str, ToolRule] = field(default_factory=dict)
    allow_unlisted_tools: bool = False
    models: tuple[str, ...] | None = None
    per_run_usd: float | None = None
    per_day_usd: float | None = None
    authorize_side_effects: bool = True
    near_cap_fraction: float = 0.8
    deadline_ms: int = 250
    fail_mode: str = FAIL_CLOSED

    @property
    def fail_open(self) -> bool:
        return self.fail_mode == FAIL_OPEN


@dataclass(frozen=True, kw_only=True)
class Usage:
    """What the run (and the agent today) has done so far, as the caller counts it.

    ``day_spend_usd`` is None when the caller does not know (the SDK before it has asked
    the collector): the day cap is then not judged locally, and counts as near.
    """

    tool_calls: Mapping[str, int] = field(default_factory=dict)
    run_spend_usd: float = 0.0
    day_spend_usd: float | None = 0.0


@dataclass(frozen=True, kw_only=True)
class Decision:
    allowed: bool
    rule: str
    manifest_sha256: str
    detail: str = ""

    @property
    def decision(self) -> str:
        return ALLOW if self.allowed else DENY

    def event_attributes(self, **extra: Any) -> dict[str, Any]:
        """The attributes of the ``agentreplay.policy.decision`` span event."""
        return {
            semconv.POLICY_DECISION: self.decision,
            semconv.POLICY_RULE: self.rule,
            semconv.MANIFEST_SHA256: self.manifest_sha256,
            semconv.POLICY_DETAIL: self.detail,
            **extra,
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "decision": self.decision,
            "rule": self.rule,
            "manifest_sha256": self.manifest_sha256,
            "detail": self.detail,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Decision:
        return cls(
            allowed=doc.get("decision") == ALLOW,
            rule=str(doc.get("rule", "")),
            manifest_sha256=str(doc.get("manifest_sha256", "")),
            detail=str(doc.get("detail", "")),
        )


# --- parsing ---------------------------------------------------------------------------
_TOP_KEYS = {
    "$schema",
    "version",
    "agent",
    "description",
    "tools",
    "unlisted_tools",
    "models",
    "spend",
    "authorization",
    "fail_mode",
}
_TOOL_KEYS = {"side_effect", "authorize", "max_per_run", "max_cost_usd", "args"}
_ARG_KEYS = {"enum", "minimum", "maximum", "pattern", "max_length", "required"}


def parse_manifest(body: Mapping[str, Any]) -> Manifest:
    """Validate a manifest body (the schema in ``policies/manifest.schema.json``, by hand: the SDK
    stays light) and return it parsed; ManifestError names the offending key."""
    if not isinstance(body, Mapping):
        raise ManifestError("a manifest is a JSON object")
    _known(body, _TOP_KEYS, "manifest")
    if body.get("version") != 1:
        raise ManifestError(f"manifest.version: expected 1, got {body.get('version')!r}")
    tools_raw = body.get("tools")
    if not isinstance(tools_raw, Mapping):
        raise ManifestError("manifest.tools: expected an object of tool name to rule")
    tools = {str(name): _tool(str(name), rule) for name, rule in tools_raw.items()}
    unlisted = body.get("unlisted_tools", "deny")
    if unlisted not in ("deny", "allow"):
        raise ManifestError(f"manifest.unlisted_tools: expected 'deny' or 'allow', got {unlisted!r}")
    models = body.get("models")
    if models is not None and (not isinstance(models, list) or not all(isinstance(m, str) for m in models)):
        raise ManifestError("manifest.models: expected a list of model name prefixes")
    spend = _obj(body.get("spend", {}), "manifest.spend", {"per_run_usd", "per_day_usd"})
    auth = _obj(
        body.get("authorization", {}),
        "manifest.authorization",
        {"side_effects", "near_cap_fraction", "deadline_ms"},
    )
    fail_mode = body.get("fail_mode", FAIL_CLOSED)
    if fail_mode not in (FAIL_CLOSED, FAIL_OPEN):
        raise ManifestError(f"manifest.fail_mode: expected 'closed' or 'open', got {fail_mode!r}")
    near = _number(auth.get("near_cap_fraction", 0.8), "manifest.authorization.near_cap_fraction")
    if not 0 <= near <= 1:
        raise ManifestError("manifest.authorization.near_cap_fraction: expected a number from 0 to 1")
    deadline = auth.get("deadline_ms", 250)
    if not isinstance(deadline, int) or isinstance(deadline, bool) or not 1 <= deadline <= 60_000:
        raise ManifestError("manifest.authorization.deadline_ms: expected an integer from 1 to 60000")
    return Manifest(
        sha256=manifest_sha256(body),
        agent=body.get("agent"),
        tools=tools,
        allow_unlisted_tools=unlisted == "allow",
        models=tuple(models) if models is not None else None,
        per_run_usd=_cap(spend.get("per_run_usd"), "manifest.spend.per_run_usd"),
        per_day_usd=_cap(spend.get("per_day_usd"), "manifest.spend.per_day_usd"),
        authorize_side_effects=bool(auth.get("side_effects", True)),
        near_cap_fraction=near,
        deadline_ms=deadline,
        fail_mode=fail_mode,
    )


def _known(doc: Mapping[str, Any], keys: set[str], where: str) -> None:
    unknown = sorted(set(doc) - keys)
    if unknown:
        raise ManifestError(f"{where}: unknown key(s) {unknown} (expected some of {sorted(keys)})")


def _obj(value: Any, where: str, keys: set[str]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ManifestError(f"{where}: expected an object")
    _known(value, keys, where)
    return value


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ManifestError(f"{where}: expected a number, got {value!r}")
    return float(value)


def _cap(value: Any, where: str) -> float | None:
    if value is None:
        return None
    number = _number(value, where)
    if number <= 0:
        raise ManifestError(f"{where}: expected a positive number, got {value!r}")
    return number


def _tool(name: str, raw: Any) -> ToolRule:
    where = f"manifest.tools.{name}"
    rule = _obj(raw, where, _TOOL_KEYS)
    limit = rule.get("max_per_run")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
        raise ManifestError(f"{where}.max_per_run: expected a non-negative integer, got {limit!r}")
    max_cost = rule.get("max_cost_usd")
    args = rule.get("args", {})
    if not isinstance(args, Mapping):
        raise ManifestError(f"{where}.args: expected an object of argument name to limits")
    return ToolRule(
        name=name,
        side_effect=bool(rule.get("side_effect", False)),
        authorize=rule.get("authorize"),
        max_per_run=limit,
        max_cost_usd=None if max_cost is None else _number(max_cost, f"{where}.max_cost_usd"),
        args={str(arg): _arg(f"{where}.args.{arg}", spec) for arg, spec in args.items()},
    )


def _arg(where: str, raw: Any) -> ArgRule:
    spec = _obj(raw, where, _ARG_KEYS)
    enum = spec.get("enum")
    if enum is not None and not isinstance(enum, list):
        raise ManifestError(f"{where}.enum: expected a list of allowed values")
    pattern = spec.get("pattern")
    try:
        compiled = re.compile(pattern) if pattern is not None else None
    except (re.error, TypeError) as exc:
        raise ManifestError(f"{where}.pattern: not a regular expression: {exc}") from exc
    max_length = spec.get("max_length")
    if max_length is not None and (not isinstance(max_length, int) or max_length < 0):
        raise ManifestError(f"{where}.max_length: expected a non-negative integer")
    return ArgRule(
        enum=tuple(enum) if enum is not None else None,
        minimum=None if spec.get("minimum") is None else _number(spec["minimum"], f"{where}.minimum"),
        maximum=None if spec.get("maximum") is None else _number(spec["maximum"], f"{where}.maximum"),
        pattern=compiled,
        max_length=max_length,
        required=bool(spec.get("required", False)),
    )


# --- evaluation --------------------------------------------------------------------------
def _deny(m: Manifest, rule: str, detail: str) -> Decision:
    return Decision(allowed=False, rule=rule, manifest_sha256=m.sha256, detail=detail)


def evaluate_tool(
    m: Manifest,
    *,
    tool: str,
    arguments: Mapping[str, Any],
    usage: Usage,
    cost_usd: float | None = None,
    spend_multiplier: float = 1.0,
) -> Decision:
    """May ``tool`` run with these arguments, given what the run has done so far?

    ``usage.tool_calls`` counts this tool's calls *before* this one.
    """
    rule = m.tools.get(tool)
    if rule is None:
        if not m.allow_unlisted_tools:
            return _deny(m, RULE_TOOL_UNLISTED, f"tool {tool!r} is not in the manifest")
    else:
        for name, arg_rule in rule.args.items():
            problem = _check_arg(name, arguments, arg_rule)
            if problem is not None:
                return _deny(m, f"tool.arg.{name}.{problem[0]}", f"{tool}: {problem[1]}")
        done = usage.tool_calls.get(tool, 0)
        if rule.max_per_run is not None and done >= rule.max_per_run:
            return _deny(
                m,
                RULE_MAX_PER_RUN,
                f"{tool} may run at most {rule.max_per_run} time(s) per run; this would be call {done + 1}",
            )
        if rule.max_cost_usd is not None and cost_usd is not None and cost_usd > rule.max_cost_usd:
            return _deny(
                m, RULE_MAX_COST, f"{tool} would cost {cost_usd:.2f} USD, over {rule.max_cost_usd:.2f}"
            )
    spend = evaluate_spend(m, usage, added_usd=cost_usd or 0.0, spend_multiplier=spend_multiplier)
    if not spend.allowed:
        return spend
    return Decision(allowed=True, rule=RULE_TOOL_ALLOWED, manifest_sha256=m.sha256)


def evaluate_llm(m: Manifest, *, model: str | None, usage: Usage, spend_multiplier: float = 1.0) -> Decision:
    """May an LLM call start? Its cost is known only after it, so the caps are judged on what
    was spent before (a call that crosses a cap completes; the next one is refused)."""
    if m.models is not None and model and not any(model.startswith(p) for p in m.models):
        return _deny(m, RULE_MODEL_UNLISTED, f"model {model!r} is not among {list(m.models)}")
    spend = evaluate_spend(m, usage, added_usd=0.0, spend_multiplier=spend_multiplier, at_cap_denies=True)
    if not spend.allowed:
        return spend
    return Decision(allowed=True, rule=RULE_LLM_ALLOWED, manifest_sha256=m.sha256)


def evaluate_spend(
    m: Manifest,
    usage: Usage,
    *,
    added_usd: float = 0.0,
    spend_multiplier: float = 1.0,
    at_cap_denies: bool = False,
) -> Decision:
    """Is spend within the caps (times the trust multiplier) once ``added_usd`` is spent?"""
    for rule, cap, spent, what in (
        (RULE_SPEND_RUN, m.per_run_usd, usage.run_spend_usd, "run"),
        (RULE_SPEND_DAY, m.per_day_usd, usage.day_spend_usd, "day"),
    ):
        if cap is None or spent is None:
            continue
        limit = cap * spend_multiplier
        total = spent + added_usd
        if total > limit + 1e-9 or (at_cap_denies and total >= limit - 1e-12):
            return _deny(
                m,
                rule,
                f"{what} spend would be {total:.4f} USD, cap {limit:.4f} USD"
                f" ({cap:g} x trust {spend_multiplier:g})",
            )
    return Decision(allowed=True, rule="spend.within", manifest_sha256=m.sha256)


def needs_authorization(
    m: Manifest,
    *,
    tool: str | None,
    side_effect: bool,
    usage: Usage,
    cost_usd: float | None = None,
    spend_multiplier: float = 1.0,
) -> bool:
    """Whether the guard must ask the collector (global state: halts, daily spend) first."""
    rule = m.tools.get(tool) if tool else None
    if rule is not None and rule.authorize is not None:
        if rule.authorize:
            return True
    elif (
        tool is not None
        and m.authorize_side_effects
        and (side_effect or (rule is not None and rule.side_effect))
    ):
        return True
    return near_cap(m, usage, added_usd=cost_usd or 0.0, spend_multiplier=spend_multiplier)


def near_cap(m: Manifest, usage: Usage, *, added_usd: float = 0.0, spend_multiplier: float = 1.0) -> bool:
    if m.per_day_usd is not None and usage.day_spend_usd is None:
        return True  # not known yet: ask
    for cap, spent in ((m.per_run_usd, usage.run_spend_usd), (m.per_day_usd, usage.day_spend_usd)):
        if (
            cap is not None
            and spent is not None
            and spent + added_usd >= m.near_cap_fraction * cap * spend_multiplier
        ):
            return True
    return False


def _check_arg(name: str, arguments: Mapping[str, Any], rule: ArgRule) -> tuple[str, str] | None:
    if name not in arguments or arguments[name] is None:
        return ("required", f"argument {name!r} is required") if rule.required else None
    value = arguments[name]
    if rule.enum is not None and value not in rule.enum:
        return "enum", f"{name}={value!r} is not one of {list(rule.enum)}"
    if rule.minimum is not None or rule.maximum is not None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return "type", f"{name}={value!r} is not a number"
        if rule.minimum is not None and value < rule.minimum:
            return "minimum", f"{name}={value!r} is below {rule.minimum:g}"
        if rule.maximum is not None and value > rule.maximum:
            return "maximum", f"{name}={value!r} is above {rule.maximum:g}"
    if rule.pattern is not None and (not isinstance(value, str) or rule.pattern.fullmatch(value) is None):
        return "pattern", f"{name}={value!r} does not match {rule.pattern.pattern!r}"
    if rule.max_length is not None and isinstance(value, (str, list, dict)) and len(value) > rule.max_length:
        return "max_length", f"{name} is {len(value)} long, over {rule.max_length}"
    return None
