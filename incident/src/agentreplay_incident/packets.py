"""A failed run told to whoever pays for it: a dispute packet for the counterparty (the airline,
the payment rail) and an insurance-claim packet for the insurer, as JSON documents and as
self-contained HTML.

Both are pure functions of a case (:mod:`agentreplay_incident.case`: the run's spans, chain, seal,
certificates, manifest and decisions) and an analysis verdict: no store, no network. Each packet
carries its proof (the chain head, the seal, the agent key the org certified, the transparency-log
inclusion when the case has one) and the one command that checks it offline with the org's public
key. Amounts are the recorded ones, each in its currency (``agentreplay.cost.amount`` and
``agentreplay.cost.currency`` on a tool's span, else ``agentreplay.cost.usd``), and amounts of two
currencies are never added up; the model spend is priced again from the price table (US dollars)
so an insurer can see how it was computed.

The claim's loss is what was charged beyond what the request allowed, with the computation shown:
a charge the analysis blames on anything but its amount (the wrong day, a second booking) is lost
whole; the other charges in a currency are held to the one amount the request names in it
("refund $12.50": refunded 50.00 USD, allowed 12.50 USD, loss 37.50 USD). A request that names no
amount gives nothing to hold a charge to: the charges the analysis blames are lost whole, the others
are not claimed, and the computation says so. Where the request's amounts cannot be matched to the
charges (several amounts, several tools, another currency), the loss says unsure.

A run recorded without keys makes packets too; their first line is the UNSIGNED notice.

A packet repeats no recorded value whole: each string (a tool result, an argument, what the model
said) is clipped to :data:`VALUE_LIMIT` characters in the JSON and so in the HTML rendered from it,
saying so; the case file beside the packet is the evidence and keeps every value whole.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentreplay_analysis import Outcome, Verdict, run_view
from agentreplay_analysis.constraints import Kind, Mention, argument_values, mentions
from agentreplay_analysis.transcript import chain_head
from agentreplay_client.models import TrustScore
from agentreplay_incident.case import NOTICE, UNSIGNED_NOTICE
from agentreplay_incident.narrative import (
    Contradiction,
    Money,
    ToldStep,
    contradictions,
    past_tense,
    request_of,
    tell,
    usd,
    utc,
)
from agentreplay_otel.core import Prices, SpanRecord, cost_usd, json_or, load_prices, semconv

if TYPE_CHECKING:
    from agentreplay_incident.case import Case

DISPUTE = "agentreplay-dispute/2"
CLAIM = "agentreplay-claim/2"
"""Each packet's ``format``: what the document is, and the version of its shape."""

CASE_FILE = "CASE.json"
ORG_KEY = "ORG.pub"
"""The names the verify command uses when the caller does not say where the case and the key lie."""

USD = semconv.CURRENCY_USD  # the model spend's currency (the price table's), and the manifest caps'
_SYMBOLS = {"$": USD, "€": "EUR", "£": "GBP"}
_WORDS = {"usd": USD, "dollar": USD, "dollars": USD, "bucks": USD, "eur": "EUR", "euro": "EUR", "euros": "EUR",
          "gbp": "GBP", "pound": "GBP", "pounds": "GBP"}
"""The currency an amount in a request is written in (``$12.50``, ``12.50 EUR``): what the analysis's
constraints recognise as money."""


VALUE_LIMIT = 2048
"""The most characters of one recorded value (a tool result, an argument, what the model said) a
packet holds, in its JSON as in its HTML; the case file beside it holds the whole value. The proof
and the signed manifest are kept whole: they are what the verify command checks."""
_WHOLE = ("proof", "allowed")


def clip_value(text: str, limit: int = VALUE_LIMIT) -> str:
    """``text`` cut to ``limit`` characters, saying how much was cut and where the rest is."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit} more characters: the whole value is in the case file]"


def _clipped(value: Any) -> Any:
    """Every string in ``value`` (keys too) clipped to :data:`VALUE_LIMIT`: a packet never repeats a
    recorded value of any size, whatever the agent recorded."""
    if isinstance(value, str):
        return clip_value(value)
    if isinstance(value, Mapping):
        return {_clipped(k): _clipped(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clipped(v) for v in value]
    return value


def _bounded(packet: dict[str, Any]) -> dict[str, Any]:
    return {k: v if k in _WHOLE else _clipped(v) for k, v in packet.items()}


def verify_command(case_file: str = CASE_FILE, org_key: str = ORG_KEY) -> str:
    return f"agentreplay verify {case_file} --org-key {org_key}"


# --- the packets ----------------------------------------------------------------------------------
def dispute_packet(case: Case, verdict: Verdict | None, *, case_file: str = CASE_FILE,
                   org_key: str = ORG_KEY) -> dict[str, Any]:
    """For the counterparty: what the user asked, what the agent did and when, what it was allowed,
    every policy decision, the amounts, and the proof with the command that verifies it."""
    told = _told(case)
    return _bounded(_notice(case) | {
        "format": DISPUTE,
        "title": f"Dispute packet for run {case.run_id}",
        "run": _run(case),
        "asked": request_of(case.spans),
        "finding": _finding(verdict),
        "contradictions": [_contradiction_json(c) for c in contradictions(verdict, told, request_of(case.spans))],
        "actions": [_action_json(s) for s in told],
        "allowed": _allowed(case),
        "decisions": _decisions(case, told),
        "amounts": _amounts(told),
        "proof": _proof(case, case_file=case_file, org_key=org_key),
    })


def insurance_packet(case: Case, verdict: Verdict | None, *, trust: TrustScore | None = None,
                     prices: Prices | None = None, case_file: str = CASE_FILE,
                     org_key: str = ORG_KEY) -> dict[str, Any]:
    """For the insurer: the loss (the wrong charges, the model spend, what the manifest prevented),
    the cause, the limits in force, the timeline, and the same proof. A run the analysis found no
    failure in has nothing to claim: said in ``claim``, not raised."""
    told = _told(case)
    loss = _loss(case, verdict, told, prices) if verdict is not None and verdict.outcome is Outcome.FAILED else None
    return _bounded(_notice(case) | {
        "format": CLAIM,
        "title": f"Insurance claim for run {case.run_id}",
        "run": _run(case),
        "claim": _claim(verdict, loss),
        "loss": loss,
        "cause": _cause(verdict),
        "limits": _limits(case, trust),
        "timeline": [_action_json(s) for s in told],
        "proof": _proof(case, case_file=case_file, org_key=org_key),
    })


def _notice(case: Case) -> dict[str, str]:
    """An unsigned run's packet opens with the UNSIGNED notice (its first line, as written)."""
    return {} if case.signed else {NOTICE: UNSIGNED_NOTICE}


def _told(case: Case) -> tuple[ToldStep, ...]:
    return tell(case.spans, halted=case.summary.halted)


def _run(case: Case) -> dict[str, Any]:
    s = case.summary
    return {
        "run_id": case.run_id, "agent_id": s.agent_id, "agent": s.agent_name, "service": s.service_name,
        "kind": s.run_kind, "started": utc(s.start_ns), "ended": utc(s.end_ns),
        "outcome": "halted" if s.halted else ("error" if s.status_code == "Error" else "ok"),
        "chain": s.chain.status.value, "recorded_cost_usd": round(s.cost_usd, 6),
        "exported": utc(case.exported_ns),
    }


def _finding(verdict: Verdict | None) -> dict[str, Any]:
    if verdict is None:
        return {"verdict": "not analysed", "root_cause": "", "culprit_step": None, "modes": []}
    return {
        "verdict": str(verdict.outcome), "judge": verdict.judge, "root_cause": verdict.root_cause,
        "culprit_step": verdict.culprit.step if verdict.culprit else None,
        "modes": [{"mode": h.mode, "name": h.failure_mode.name, "explanation": h.explanation} for h in verdict.modes],
    }


def _contradiction_json(c: Contradiction) -> dict[str, Any]:
    def side(s: Any) -> dict[str, Any]:
        return {"label": s.label, "value": s.value, "step": s.step, "path": s.path, "context": s.context}

    return {"mode": c.mode, "name": c.mode_name, "explanation": c.explanation, "left": side(c.left),
            "right": side(c.right)}


def _action_json(s: ToldStep) -> dict[str, Any]:
    doc: dict[str, Any] = {"step": s.step, "time": s.when, "kind": s.kind, "name": s.name, "span_id": s.span_id,
                           "caption": s.caption, "cost_usd": s.cost_usd,
                           "charge": s.charge.to_json() if s.charge is not None else None}
    if s.kind == "tool":
        doc |= {"arguments": dict(s.arguments), "result": s.result, "side_effect": s.side_effect,
                "refused": s.refused}
    else:
        doc |= {"asked_for": list(s.asked_for), "said": s.said}
    if s.failed:
        doc["error"] = s.error
    return doc


def _manifest_doc(case: Case) -> dict[str, Any] | None:
    doc = json_or(case.manifest, None) if case.manifest else None
    return doc if isinstance(doc, dict) and isinstance(doc.get("manifest"), dict) else None


def _allowed(case: Case) -> dict[str, Any]:
    """The signed manifest in force, as signed (so it can be checked), and its rules in short."""
    signed = _manifest_doc(case)
    if signed is None:
        return {"manifest": None, "note": "no signed manifest was in force for this run"}
    body = signed["manifest"]
    return {
        "sha256": case.manifest_sha256, "signed_by": signed.get("kid", ""),
        "tools": body.get("tools", {}), "unlisted_tools": body.get("unlisted_tools", "deny"),
        "models": body.get("models"), "spend": body.get("spend", {}), "fail_mode": body.get("fail_mode", "closed"),
        "manifest": signed,
    }


def _decisions(case: Case, told: Sequence[ToldStep]) -> list[dict[str, Any]]:
    """Every stored policy decision, with the step it was on; the span events when none were stored."""
    step_of = {s.span_id: s.step for s in told}
    if case.decisions:
        return [{"time": utc(d.time_ns), "step": step_of.get(d.span_id), "tool": d.tool, "decision": d.decision,
                 "rule": d.rule, "detail": d.detail, "source": d.source, "manifest_sha256": d.manifest_sha256}
                for d in sorted(case.decisions, key=lambda d: d.time_ns)]
    return [{"time": s.when, "step": s.step, "tool": s.name, "decision": d.outcome, "rule": d.rule,
             "detail": d.detail, "source": "span event", "manifest_sha256": case.manifest_sha256}
            for s in told for d in s.decisions]


def _amounts(told: Sequence[ToldStep]) -> dict[str, Any]:
    """Each charge in its currency, the total charged in each currency (never across two), the
    refused calls (not charged) and the model spend (US dollars)."""
    charged = _charged(told)
    refused = [_charge(s) for s in told if s.kind == "tool" and s.refused]
    model = sum(s.cost_usd or 0.0 for s in told if s.kind == "llm")
    return {
        "charges": [_charge(s) for s in charged], "charged": _by_currency(s.charge for s in charged),
        "refused": refused, "model_spend_usd": round(model, 6),
    }


def _charged(told: Sequence[ToldStep]) -> list[ToldStep]:
    """The tool calls that moved money: they ran (not refused) and recorded a charge."""
    return [s for s in told if s.kind == "tool" and not s.refused and s.charge is not None and s.charge.amount]


def _by_currency(amounts: Iterable[Money | None]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for m in amounts:
        if m is not None:
            totals[m.currency] = round(totals.get(m.currency, 0.0) + m.amount, 6)
    return totals


def _charge(s: ToldStep) -> dict[str, Any]:
    return {"step": s.step, "time": s.when, "tool": s.name, "what": past_tense(s.name), "arguments": dict(s.arguments),
            "amount": s.charge.amount if s.charge else None, "currency": s.charge.currency if s.charge else None}


# --- the claim ------------------------------------------------------------------------------------
def _claim(verdict: Verdict | None, loss: Mapping[str, Any] | None) -> dict[str, Any]:
    if loss is None:
        why = ("the run was not analysed" if verdict is None else
               f"the analysis found no failure (verdict: {verdict.outcome})")
        return {"nothing_to_claim": True, "reason": f"Nothing to claim: {why}.", "amounts": {}, "unsure": []}
    reason = " ".join(["The run failed; the loss is what it was charged beyond what the request allowed, and the "
                       "model spend:", *(f"{line}." for line in loss["computation"])])
    return {"nothing_to_claim": False, "reason": reason, "amounts": dict(loss["total"]), "unsure": list(loss["unsure"])}


def _blamed_steps(verdict: Verdict) -> set[int]:
    """The steps a failure mode names: its culprit and every step its evidence quotes."""
    steps = {e.step for h in verdict.modes for e in h.evidence if e.step is not None}
    steps |= {h.culprit.step for h in verdict.modes if h.culprit and h.culprit.step is not None}
    if verdict.culprit and verdict.culprit.step is not None:
        steps.add(verdict.culprit.step)
    return steps


def _blamed_amounts(verdict: Verdict) -> set[int]:
    """The tool steps the analysis blames for an amount argument (the request named another amount)."""
    prefix = semconv.GEN_AI_TOOL_CALL_ARGUMENTS + "."
    return {e.step for h in verdict.modes for e in h.evidence
            if e.step is not None and e.path.startswith(prefix)
            and any(m.kind is Kind.AMOUNT for m in argument_values(e.path.removeprefix(prefix), e.value))}


@dataclass(frozen=True, kw_only=True)
class _Charged:
    """A charge, and what the analysis says of it."""

    told: ToldStep
    money: Money
    blamed: bool  # a step the analysis names, or a call its culprit asked for
    on_amount: bool  # blamed for its amount: held to what the request allowed, not lost whole

    @property
    def whole(self) -> bool:
        return self.blamed and not self.on_amount

    def words(self) -> str:
        verb = past_tense(self.told.name)
        return f"{verb if verb != 'called' else self.told.name + ' charged'} {self.money.exact} (step {self.told.step})"


@dataclass(frozen=True, kw_only=True)
class _Loss:
    """The loss in one currency: how it was computed, and whether part of it is unsure."""

    currency: str
    charged: float
    lost_whole: float
    allowed: float | None  # what the request allowed in this currency; None when it names none (or unsure)
    allowed_quote: str
    beyond: float  # charged beyond the allowed amount
    loss: float
    computation: str
    unsure: str  # why part of the loss cannot be said; "" when it can

    def to_json(self) -> dict[str, Any]:
        return {"charged": round(self.charged, 6), "lost_whole": round(self.lost_whole, 6), "allowed": self.allowed,
                "allowed_quote": self.allowed_quote, "beyond_allowed": round(self.beyond, 6),
                "loss": round(self.loss, 6), "computation": self.computation, "unsure": self.unsure}


def currency_of(quote: str) -> str | None:
    """The currency an amount is written in (``$12.50``: USD, ``12.50 euros``: EUR), if it says."""
    for symbol, code in _SYMBOLS.items():
        if symbol in quote:
            return code
    word = re.search(r"([a-z]+)\s*$", quote.lower())
    return _WORDS.get(word.group(1)) if word else None


def loss_in(currency: str, charges: Sequence[_Charged], stated: Sequence[Mention]) -> _Loss:
    """What was charged in ``currency`` beyond what the request (``stated``: its amounts) allowed."""
    mine = [c for c in charges if c.money.currency == currency]
    whole = [c for c in mine if c.whole]
    held = [c for c in mine if not c.whole]
    lost_whole, held_sum = sum((c.money.amount for c in whole), 0.0), sum((c.money.amount for c in held), 0.0)
    here = [m for m in stated if currency_of(m.quote) == currency]
    there = sorted({m.quote for m in stated if currency_of(m.quote) not in (currency, None)})
    values = {m.value for m in here}
    parts = [f"{_listed(whole)} lost whole (the analysis blames the call)"] if whole else []
    allowed: float | None = None
    quote, unsure, beyond = "", "", 0.0
    if not here and not there:
        parts.insert(0, "the request names no amount, so only what the analysis blames is lost")
        if held:
            parts.append(f"{_listed(held)} not blamed, not claimed")
    elif not held:
        parts.append(f"nothing else charged in {currency}")
    elif not here:
        unsure = (f"the request names {', '.join(there)}, the charges are in {currency} ({_listed(held)}): no exchange "
                  "rate is applied, so what it allowed of them is unsure")
    elif len(values) > 1 or any(m.bound == "min" for m in here):
        unsure = (f"the request names {', '.join(m.quote for m in here)}: which of {_listed(held)} each allowed is "
                  "unsure")
    elif len({c.told.name for c in held}) > 1:
        unsure = (f"the request names one amount ({here[0].quote}) and the charges held to it come from several "
                  f"tools ({_listed(held)}): which it allowed is unsure")
    else:
        allowed, quote = float(here[0].value), here[0].quote
        beyond = max(0.0, held_sum - allowed)
        parts.append(f"{_listed(held)}; the request allowed {Money(allowed, currency).exact} (“{quote}”); "
                     f"{Money(beyond, currency).exact} beyond it")
    if unsure:
        parts.append(f"unsure: {unsure}")
    loss = lost_whole + beyond
    computation = "; ".join([*parts, f"loss {'at least ' if unsure else ''}{Money(loss, currency).exact}"])
    return _Loss(currency=currency, charged=lost_whole + held_sum, lost_whole=lost_whole, allowed=allowed,
                 allowed_quote=quote, beyond=beyond, loss=loss, computation=computation, unsure=unsure)


def _listed(charges: Sequence[_Charged]) -> str:
    if len(charges) == 1:
        return charges[0].words()
    total = Money(sum(c.money.amount for c in charges), charges[0].money.currency)
    return f"{' and '.join(c.words() for c in charges)}: {total.exact} in all"


def _loss(case: Case, verdict: Verdict, told: Sequence[ToldStep], prices: Prices | None) -> dict[str, Any]:
    """The charges beyond what the request allowed, in each currency (:func:`loss_in`); the model spend
    of the failed run, priced from the price table; and what the manifest refused (prevented: not charged)."""
    blamed, on_amount = _blamed_steps(verdict), _blamed_amounts(verdict)
    view = run_view(case.spans)
    steps = {s.step: s for s in view.steps}
    charges: list[_Charged] = []
    for s in _charged(told):
        issuer = view.issuer(steps[s.step]) if s.step in steps else None
        named = s.step in blamed or (issuer is not None and issuer.step in blamed)
        assert s.charge is not None
        charges.append(_Charged(told=s, money=s.charge, blamed=named, on_amount=s.step in on_amount))
    stated = [m for m in mentions(request_of(case.spans)) if m.kind is Kind.AMOUNT and not m.negated]
    losses = [loss_in(c, charges, stated) for c in dict.fromkeys(c.money.currency for c in charges)]
    counted = {c.told.step for c in charges
               if c.whole or any(x.currency == c.money.currency and x.beyond > 0 for x in losses)}
    model = _model_spend(case.spans, prices)
    prevented = [_charge(s) | {"at_most_usd": _cap(case, s.name),
                               "why": next((d.detail or d.rule for d in s.decisions if d.outcome == "deny"), "")}
                 for s in told if s.kind == "tool" and s.refused]
    total = {x.currency: round(x.loss, 6) for x in losses}
    total[USD] = round(total.get(USD, 0.0) + model["priced_usd"], 6)
    computation = [f"{x.currency}: {x.computation}" for x in losses]
    computation.append(f"model spend {Money(model['priced_usd'], USD)} (the LLM calls, priced from their tokens)")
    return {
        "computation": computation,
        "by_currency": {x.currency: x.to_json() for x in losses},
        "wrong_charges": [_charge(c.told) for c in charges if c.told.step in counted],
        "other_charges": [_charge(c.told) for c in charges if c.told.step not in counted],
        "model_spend": model,
        "prevented": prevented,
        "total": total,
        "unsure": [f"{x.currency}: {x.unsure}" for x in losses if x.unsure],
    }


def _cap(case: Case, tool: str) -> float | None:
    """The most one call of ``tool`` could have cost under the manifest (a cap, not a price)."""
    signed = _manifest_doc(case)
    rule = ((signed or {}).get("manifest", {}).get("tools") or {}).get(tool) or {}
    cap = rule.get("max_cost_usd") if isinstance(rule, dict) else None
    return float(cap) if isinstance(cap, int | float) else None


def _model_spend(spans: Sequence[SpanRecord], prices: Prices | None) -> dict[str, Any]:
    """Each LLM call priced from its recorded tokens and the price table, beside its recorded cost."""
    table = prices if prices is not None else load_prices()
    calls: list[dict[str, Any]] = []
    unpriced: list[str] = []
    for s in spans:
        a = s.attributes
        if a.get(semconv.GEN_AI_OPERATION_NAME) == semconv.OP_EXECUTE_TOOL or semconv.STEP not in a:
            continue
        model = a.get(semconv.GEN_AI_RESPONSE_MODEL) or a.get(semconv.GEN_AI_REQUEST_MODEL, "")
        tokens_in, tokens_out = _int(a.get(semconv.GEN_AI_USAGE_INPUT_TOKENS)), _int(a.get(semconv.GEN_AI_USAGE_OUTPUT_TOKENS))
        priced = cost_usd(model, tokens_in, tokens_out, table)
        if priced is None:
            unpriced.append(model)
        recorded = a.get(semconv.COST_USD)
        calls.append({"step": int(a[semconv.STEP]), "model": model, "input_tokens": tokens_in,
                      "output_tokens": tokens_out, "priced_usd": priced,
                      "recorded_usd": float(recorded) if recorded else None})
    calls.sort(key=lambda c: c["step"])
    return {"calls": calls, "priced_usd": round(sum(float(c["priced_usd"] or 0.0) for c in calls), 10),
            "unpriced_models": sorted(set(unpriced)), "price_table": "USD per million tokens, by model prefix"}


def _int(raw: str | None) -> int | None:
    return int(raw) if raw and raw.isdigit() else None


def _cause(verdict: Verdict | None) -> dict[str, Any]:
    if verdict is None:
        return {"classification": [], "root_cause": "not analysed", "culprit": None}
    return {
        "verdict": str(verdict.outcome), "judge": verdict.judge, "root_cause": verdict.root_cause,
        "classification": [{"mode": h.mode, "name": h.failure_mode.name, "category": str(h.failure_mode.category),
                            "detector": h.detector, "explanation": h.explanation,
                            "culprit_step": h.culprit.step if h.culprit else None} for h in verdict.modes],
        "culprit": verdict.culprit.to_json() if verdict.culprit else None,
        "fork_command": verdict.fork_command(),
    }


def _limits(case: Case, trust: TrustScore | None) -> dict[str, Any]:
    allowed = _allowed(case)
    caps = {name: {k: rule[k] for k in ("max_per_run", "max_cost_usd", "side_effect") if k in rule}
            for name, rule in (allowed.get("tools") or {}).items() if isinstance(rule, dict)}
    return {
        "manifest_sha256": allowed.get("sha256"), "tool_caps": caps, "spend": allowed.get("spend"),
        "fail_mode": allowed.get("fail_mode"),
        "trust": {"known": True, "score": trust.score, "tier": trust.tier,
                  "spend_multiplier": trust.spend_multiplier, "runs": trust.runs} if trust else {"known": False},
    }


# --- the proof ------------------------------------------------------------------------------------
def _proof(case: Case, *, case_file: str, org_key: str) -> dict[str, Any]:
    """What anyone can check offline with the org's public key, and the command that does."""
    root = next((s for s in case.spans if s.is_root and semconv.CHAIN_SEAL in s.attributes), None)
    seqs = [int(s.attributes[semconv.CHAIN_SEQ]) for s in case.spans
            if s.attributes.get(semconv.CHAIN_SEQ, "").isdigit()]
    root_attrs: Mapping[str, str] = root.attributes if root else {}
    return {
        "run_id": case.run_id,
        "chain_head": chain_head(list(case.spans)),
        "last_seq": max(seqs) if seqs else None,
        "spans": len(case.spans),
        "chain_state": case.summary.chain.status.value,
        "seal": root_attrs.get(semconv.CHAIN_SEAL, ""),
        "agent_key_id": root_attrs.get(semconv.IDENTITY_KID, ""),
        "manifest_sha256": case.manifest_sha256,
        "certificates": dict(case.certificates),
        "transparency_log": list(case.inclusion),
        "verify": verify_command(case_file, org_key) if case.signed else f"agentreplay verify {case_file}",
        "how": _UNSIGNED_HOW if not case.signed else "The seal is the agent's Ed25519 signature over (run, agent, last seq, chain head, manifest); "
               "the certificate is the org's token for that agent key; the command recomputes every link "
               "from the spans, checks the seal with the certified key, the manifest's signature and each "
               "log inclusion proof, with the org's public key alone.",
    }


_UNSIGNED_HOW = ("The run is unsigned: it was recorded without an agent key, so it has no seal and no certificate. "
                 "The command checks only that the chain's links agree with the spans, which whoever edits the "
                 "spans can redo: this proves nothing about who recorded the run.")


# --- HTML -----------------------------------------------------------------------------------------
_CSS = """
body{font:15px/1.5 system-ui,-apple-system,'Segoe UI',sans-serif;margin:2rem auto;max-width:60rem;color:#1b1f24;
padding:0 1rem}
h1{font-size:1.5rem}h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #d0d7de}
table{border-collapse:collapse;width:100%;margin:.5rem 0}td,th{border:1px solid #d0d7de;padding:.3rem .5rem;
text-align:left;vertical-align:top;overflow-wrap:anywhere}th{background:#f6f8fa}
code,pre{font:13px ui-monospace,monospace;background:#f6f8fa;border-radius:4px}pre{padding:.6rem;overflow:auto;
white-space:pre-wrap;word-break:break-all}
.deny{color:#b42318;font-weight:600}.allow{color:#1a7f37}.big{font-size:1.3rem;font-weight:600}
.vs{display:grid;grid-template-columns:1fr 1fr;gap:1rem}.vs div{border:2px solid #d0d7de;border-radius:6px;
padding:.6rem}.vs .right{border-color:#b42318}
.unsigned{background:#fff1e5;border:2px solid #b42318;color:#b42318;font-weight:600;padding:.5rem;border-radius:6px}
"""


def render_html(packet: Mapping[str, Any]) -> str:
    """The packet as one self-contained HTML document (no script, no network); every recorded
    string is escaped."""
    notice = packet.get(NOTICE)
    parts = [f"<p class=\"unsigned\">{_e(notice)}</p>" if notice else "",
             f"<h1>{_e(packet.get('title', 'Packet'))}</h1>", _kv_table(packet.get("run") or {})]
    for key, value in packet.items():
        if key in ("format", "title", "run", NOTICE):
            continue
        parts.append(f"<h2>{_e(_heading(key))}</h2>")
        parts.append(_section(key, value))
    body = "\n".join(parts)
    first = "<!doctype html>" + (f"<!-- {_e(notice)} -->" if notice else "")
    return (f"{first}\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
            f"<title>{_e(packet.get('title', 'Packet'))}</title><style>{_CSS}</style></head>"
            f"<body data-format=\"{_e(packet.get('format', ''))}\">\n{body}\n</body></html>\n")


_HEADINGS = {"asked": "What the user asked", "finding": "What went wrong", "contradictions": "The contradiction",
             "actions": "What the agent did, and when", "allowed": "What the agent was allowed (signed manifest)",
             "decisions": "Every policy decision", "amounts": "Amounts", "proof": "Proof",
             "claim": "Claim", "loss": "Loss", "cause": "Cause", "limits": "Limits in force", "timeline": "Timeline"}


def _heading(key: str) -> str:
    return _HEADINGS.get(key, _label(key).capitalize())


def _label(key: str) -> str:
    """A JSON key as a reader says it: ``amount_usd`` -> ``amount (USD)``, ``run_id`` -> ``run id``."""
    base, usd_ = (key.removesuffix("_usd"), True) if key.endswith("_usd") else (key, False)
    return base.replace("_", " ") + (" (USD)" if usd_ else "")


def _section(key: str, value: Any) -> str:
    if key == "asked":
        return f"<blockquote class=\"big\">{_e(value)}</blockquote>"
    if key == "contradictions":
        return "".join(_vs(c) for c in value) or "<p>None recorded.</p>"
    if key in ("actions", "timeline"):
        return _rows(value, ("step", "time", "caption", "cost_usd"))
    if key == "decisions":
        return _rows(value, ("time", "step", "tool", "decision", "rule", "detail", "source"))
    if key == "claim":
        return f"<p class=\"big\">{_e(value.get('reason', ''))}</p>" + _kv_table(value)
    if key == "proof":
        verify = f"<p>Verify it yourself:</p><pre>{_e(value.get('verify', ''))}</pre>"
        return verify + _kv_table(value)
    if isinstance(value, Mapping):
        return _kv_table(value)
    if isinstance(value, list):
        return _rows(value, tuple(value[0].keys())) if value and isinstance(value[0], Mapping) else _pre(value)
    return f"<p>{_e(value)}</p>"


def _vs(c: Mapping[str, Any]) -> str:
    def side(s: Mapping[str, Any], cls: str) -> str:
        where = f"step {s['step']}" if s.get("step") is not None else ""
        context = f"<p><small>{_e(s.get('context', ''))}</small></p>" if s.get("context") else ""
        return (f"<div class=\"{cls}\"><div>{_e(s.get('label', ''))}</div><div class=\"big\">{_e(s.get('value', ''))}"
                f"</div>{context}<small>{_e(where)} <code>{_e(s.get('path', ''))}</code></small></div>")

    return (f"<p><b>{_e(c.get('mode', ''))} {_e(c.get('name', ''))}</b>: {_e(c.get('explanation', ''))}</p>"
            f"<div class=\"vs\">{side(c['left'], 'left')}{side(c['right'], 'right')}</div>")


def _kv_table(doc: Mapping[str, Any]) -> str:
    rows = "".join(f"<tr><th>{_e(_label(str(k)))}</th><td>{_cell(v, str(k))}</td></tr>" for k, v in doc.items())
    return f"<table>{rows}</table>"


def _rows(items: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    if not items:
        return "<p>None.</p>"
    head = "".join(f"<th>{_e(_label(c))}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td{_cls(c, i.get(c))}>{_cell(i.get(c), c)}</td>" for c in columns) + "</tr>"
                   for i in items)
    return f"<table><tr>{head}</tr>{body}</table>"


def _cls(column: str, value: Any) -> str:
    return f" class=\"{_e(value)}\"" if column == "decision" and value in ("allow", "deny") else ""


_CURRENCY = re.compile(r"[A-Z]{3}")
"""A key that is an ISO 4217 code: its number is an amount in that currency (a total, a cap, a charge)."""


def _cell(value: Any, key: str = "") -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float) and key.endswith("_usd"):
        return _e(usd(value))
    if isinstance(value, int | float) and _CURRENCY.fullmatch(key):
        return _e(Money(float(value), key))
    if key == "rates" and isinstance(value, Mapping) and value:
        return _rates(value)
    if isinstance(value, str | int):
        return _e(value)
    if isinstance(value, Mapping) and value:
        return _kv_table(value)
    if isinstance(value, list) and not value:
        return "none"
    if isinstance(value, list) and all(isinstance(i, Mapping) for i in value):
        return _rows(value, tuple(dict.fromkeys(k for i in value for k in i)))
    return _pre(value)


def _rates(rates: Mapping[str, Any]) -> str:
    """The manifest's rates as what they are, US dollars per unit of a currency (``$1.08 per EUR``), never
    as an amount in that currency."""
    rows = "".join(f"<tr><th>{_e(code)}</th><td>{_e(f'{usd(float(rate))} per {code}')}</td></tr>"
                   if isinstance(rate, int | float) and not isinstance(rate, bool) else
                   f"<tr><th>{_e(code)}</th><td>{_cell(rate)}</td></tr>" for code, rate in rates.items())
    return f"<table>{rows}</table>"


def _pre(value: Any) -> str:
    return f"<pre>{_e(json.dumps(value, ensure_ascii=False, indent=1))}</pre>"


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)
