"""Scope manifests and the one evaluator that both enforcement points share.

The SDK's guard (before a tool runs) and the collector's ``agentreplay_scope`` processor
(on every received span) call the same pure functions here, so the agent and the
collector cannot disagree about what a manifest allows. Nothing here does I/O or reads
a clock: the caller supplies what has happened so far as a :class:`Usage`.

Every answer is a :class:`Decision`: allowed or not, the rule that decided, and the hash
of the manifest it was decided under, so a decision can be audited and replayed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from agentreplay_otel import semconv
from agentreplay_otel.errors import ManifestError
from agentreplay_otel.identity import manifest_sha256

USD: Final = semconv.CURRENCY_USD

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
RULE_SPEND_CURRENCY: Final = "spend.currency"  # a charge in a currency no cap counts and no rate converts
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
    # Caps in other currencies (ISO 4217 code -> amount; USD caps are the two above), and the rates
    # (US dollars per unit) that count a charge in another currency toward the USD caps.
    per_run: Mapping[str, float] = field(default_factory=dict)
    per_day: Mapping[str, float] = field(default_factory=dict)
    rates: Mapping[str, float] = field(default_factory=dict)
    authorize_side_effects: bool = True
    near_cap_fraction: float = 0.8
    deadline_ms: int = 250
    fail_mode: str = FAIL_CLOSED

    @property
    def fail_open(self) -> bool:
        return self.fail_mode == FAIL_OPEN

    @property
    def capped(self) -> bool:
        """Whether any spend cap is set (without one, no charge counts toward anything)."""
        return self.per_run_usd is not None or self.per_day_usd is not None or bool(self.per_run or self.per_day)


@dataclass(frozen=True)
class Charge:
    """What one call charges: an amount in an ISO 4217 currency (a tool's ``cost=`` and ``currency=``)."""

    amount: float
    currency: str = USD


@dataclass(frozen=True, kw_only=True)
class Counted:
    """How a manifest counts one charge: ``usd`` toward its USD caps (a USD charge, or another
    currency at its rate), ``native`` toward caps in the charge's own currency, and ``covered``:
    whether any cap counts it at all (False: a currency no cap is in and no rate converts)."""

    usd: float = 0.0
    native: Mapping[str, float] = field(default_factory=dict)
    covered: bool = True
    usd_value: float | None = None  # the charge in US dollars, where known (for ``max_cost_usd``)


def count_charge(m: Manifest, charge: Charge | None) -> Counted:
    """The one rule for a charge in any currency, shared by the guard and the collector: a USD charge
    counts toward the USD caps; a charge in another currency counts toward the caps in that currency,
    and, where ``spend.rates`` has its rate, at that rate toward the USD caps. A charge neither
    counts is not covered (:func:`evaluate_tool` denies it under ``fail_mode: closed``)."""
    if charge is None or not charge.amount:
        return Counted(usd_value=0.0 if charge is not None else None)
    currency = charge.currency
    if currency == USD:
        return Counted(usd=charge.amount, usd_value=charge.amount)
    rate = m.rates.get(currency)
    usd = charge.amount * rate if rate is not None else 0.0
    native = {currency: charge.amount} if currency in m.per_run or currency in m.per_day else {}
    return Counted(
        usd=usd,
        native=native,
        covered=rate is not None or bool(native) or not m.capped,
        usd_value=usd if rate is not None else None,
    )


@dataclass(frozen=True, kw_only=True)
class Usage:
    """What the run (and the agent today) has done so far, as the caller counts it.

    ``day_spend_usd`` is None when the caller does not know (the SDK before it has asked
    the collector): the day cap is then not judged locally, and counts as near.
    """

    tool_calls: Mapping[str, int] = field(default_factory=dict)
    run_spend_usd: float = 0.0
    day_spend_usd: float | None = 0.0
    # what was charged in other currencies (code -> amount, as charged: counted toward the caps in
    # those currencies, and at the manifest's rates toward its USD caps); ``day_spend`` None: not
    # known (as ``day_spend_usd``)
    run_spend: Mapping[str, float] = field(default_factory=dict)
    day_spend: Mapping[str, float] | None = field(default_factory=dict)


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
    spend = _obj(
        body.get("spend", {}), "manifest.spend", {"per_run_usd", "per_day_usd", "per_run", "per_day", "rates"}
    )
    per_run_usd, per_run = _caps(spend, "per_run")
    per_day_usd, per_day = _caps(spend, "per_day")
    rates = _by_currency(spend.get("rates", {}), "manifest.spend.rates", "a positive number of US dollars")
    if USD in rates:
        raise ManifestError("manifest.spend.rates.USD: a rate is US dollars per unit of another currency; USD needs none")
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
        per_run_usd=per_run_usd,
        per_day_usd=per_day_usd,
        per_run=per_run,
        per_day=per_day,
        rates=rates,
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


def _currency(code: Any, where: str) -> str:
    if not isinstance(code, str) or len(code) != 3 or not code.isascii() or not code.isalpha() or not code.isupper():
        raise ManifestError(
            f"{where}: {code!r} is not a currency: expected a three-letter ISO 4217 code in capitals, such as USD or EUR"
        )
    return code


def _by_currency(value: Any, where: str, what: str) -> dict[str, float]:
    """``{"EUR": 600, ...}``: each key a currency code, each value a positive number."""
    if not isinstance(value, Mapping):
        raise ManifestError(
            f"{where}: expected an object of currency code (ISO 4217, such as EUR) to {what},"
            f" such as {{\"EUR\": 600}}, not {value!r}"
        )
    out: dict[str, float] = {}
    for code, amount in value.items():
        at = f"{where}.{code}"
        currency = _currency(code, at)
        number = _cap(amount, at)
        if number is None or not math.isfinite(number):
            raise ManifestError(f"{at}: expected {what}, got {amount!r}")
        out[currency] = number
    return out


def _caps(spend: Mapping[str, Any], name: str) -> tuple[float | None, dict[str, float]]:
    """A cap written ``per_run_usd: 600`` (US dollars) and/or ``per_run: {EUR: 600, ...}``: the USD
    cap and the caps in other currencies (a USD cap in both forms must be the same)."""
    usd = _cap(spend.get(f"{name}_usd"), f"manifest.spend.{name}_usd")
    if usd is not None and not math.isfinite(usd):
        raise ManifestError(f"manifest.spend.{name}_usd: expected a finite positive number, got {usd!r}")
    caps = _by_currency(spend.get(name, {}), f"manifest.spend.{name}", "a positive cap in that currency")
    in_usd = caps.pop(USD, None)
    if in_usd is not None:
        if usd is not None and usd != in_usd:
            raise ManifestError(
                f"manifest.spend.{name}.USD ({in_usd:g}) and manifest.spend.{name}_usd ({usd:g}) disagree: give one"
            )
        usd = in_usd
    return usd, caps


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
    charge: Charge | None = None,
    spend_multiplier: float = 1.0,
) -> Decision:
    """May ``tool`` run with these arguments, given what the run has done so far?

    ``usage.tool_calls`` counts this tool's calls *before* this one. Its cost is ``charge`` (an
    amount in a currency) or ``cost_usd`` (US dollars); :func:`count_charge` says what it counts
    toward. A charge no cap counts is denied (``spend.currency``) under ``fail_mode: closed``; under
    open the call is allowed by that rule, for the caller to alert on.
    """
    if charge is None and cost_usd is not None:
        charge = Charge(cost_usd)
    counted = count_charge(m, charge)
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
        worth = counted.usd_value
        if rule.max_cost_usd is not None and worth is not None and worth > rule.max_cost_usd:
            said = "" if charge is None or charge.currency == USD else f" ({_money(charge)} at the manifest's rate)"
            return _deny(
                m, RULE_MAX_COST, f"{tool} would cost {worth:.2f} USD{said}, over {rule.max_cost_usd:.2f}"
            )
    uncounted: Decision | None = None
    if not counted.covered and charge is not None:
        detail = (
            f"{tool} charges {_money(charge)}: no spend cap is in {charge.currency} and spend.rates has no"
            f" {charge.currency} rate, so the charge would count toward no cap"
        )
        if not m.fail_open:
            return _deny(m, RULE_SPEND_CURRENCY, f"{detail} (fail_mode closed: refused)")
        uncounted = Decision(
            allowed=True, rule=RULE_SPEND_CURRENCY, manifest_sha256=m.sha256, detail=f"{detail} (fail_mode open: allowed)"
        )
    spend = evaluate_spend(
        m, usage, added_usd=counted.usd, added=counted.native, spend_multiplier=spend_multiplier
    )
    if not spend.allowed:
        return spend
    return uncounted or Decision(allowed=True, rule=RULE_TOOL_ALLOWED, manifest_sha256=m.sha256)


def _money(charge: Charge) -> str:
    return f"{charge.currency} {charge.amount:,.2f}"


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
    added: Mapping[str, float] | None = None,
    spend_multiplier: float = 1.0,
    at_cap_denies: bool = False,
) -> Decision:
    """Is spend within the caps (times the trust multiplier) once ``added_usd`` (and ``added``, in
    other currencies) is spent? Each cap counts spend in its own currency."""
    for rule, cap, spent, what, currency, plus in _caps_and_spend(m, usage, added_usd, added or {}):
        limit = cap * spend_multiplier
        total = spent + plus
        if total > limit + 1e-9 or (at_cap_denies and total >= limit - 1e-12):
            return _deny(
                m,
                rule,
                f"{what} spend would be {total:.4f} {currency}, cap {limit:.4f} {currency}"
                f" ({cap:g} x trust {spend_multiplier:g})",
            )
    return Decision(allowed=True, rule="spend.within", manifest_sha256=m.sha256)


def _caps_and_spend(
    m: Manifest, usage: Usage, added_usd: float, added: Mapping[str, float]
) -> list[tuple[str, float, float, str, str, float]]:
    """Each cap with what was spent toward it (known) and what would be added: (rule, cap, spent,
    run or day, currency, added). Toward a USD cap count the US dollars spent and, at the manifest's
    rates, what was charged in other currencies."""
    out: list[tuple[str, float, float, str, str, float]] = []
    for rule, what, usd_cap, usd_spent, caps, spent in (
        (RULE_SPEND_RUN, "run", m.per_run_usd, usage.run_spend_usd, m.per_run, usage.run_spend),
        (RULE_SPEND_DAY, "day", m.per_day_usd, usage.day_spend_usd, m.per_day, usage.day_spend),
    ):
        if usd_cap is not None and usd_spent is not None:
            converted = sum(m.rates[c] * a for c, a in (spent or {}).items() if c in m.rates)
            out.append((rule, usd_cap, usd_spent + converted, what, USD, added_usd))
        if spent is not None:
            for currency, cap in caps.items():
                out.append((rule, cap, spent.get(currency, 0.0), what, currency, added.get(currency, 0.0)))
    return out


def needs_authorization(
    m: Manifest,
    *,
    tool: str | None,
    side_effect: bool,
    usage: Usage,
    cost_usd: float | None = None,
    charge: Charge | None = None,
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
    counted = count_charge(m, charge if charge is not None else None if cost_usd is None else Charge(cost_usd))
    return near_cap(m, usage, added_usd=counted.usd, added=counted.native, spend_multiplier=spend_multiplier)


def near_cap(
    m: Manifest,
    usage: Usage,
    *,
    added_usd: float = 0.0,
    added: Mapping[str, float] | None = None,
    spend_multiplier: float = 1.0,
) -> bool:
    if (m.per_day_usd is not None and usage.day_spend_usd is None) or (m.per_day and usage.day_spend is None):
        return True  # not known yet: ask
    return any(
        spent + plus >= m.near_cap_fraction * cap * spend_multiplier
        for _, cap, spent, _, _, plus in _caps_and_spend(m, usage, added_usd, added or {})
    )


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
