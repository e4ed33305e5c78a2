"""A run told in plain words, step by step, for people who never read a span: what the packets'
timelines and the walkthrough say of each LLM and tool call, and the contradiction an analysis
found, as two sides to put next to each other ("asked: Friday" / "booked: Saturday").

Pure functions of the stored spans and a verdict; the recorded strings are quoted as they are
(whoever renders them escapes them).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentreplay_analysis import Evidence, ModeHit, Verdict, run_view
from agentreplay_analysis.transcript import Decision, Step, key_words
from agentreplay_incident.diffing import clip
from agentreplay_otel.core import SpanRecord, semconv

_PAST = {"book": "booked", "buy": "bought", "purchase": "purchased", "pay": "paid", "send": "sent",
         "transfer": "transferred", "order": "ordered", "reserve": "reserved", "schedule": "scheduled",
         "cancel": "cancelled", "delete": "deleted", "remove": "removed", "submit": "submitted",
         "charge": "charged", "refund": "refunded", "wire": "wired", "email": "emailed", "checkout": "checked out",
         "search": "searched", "negotiate": "negotiated", "get": "got", "find": "found", "list": "listed",
         "check": "checked", "create": "created", "update": "updated"}
"""Past tenses of the first words of tool names (``book_flight`` -> "booked"), for captions."""


@dataclass(frozen=True)
class Money:
    """An amount in one currency (ISO 4217). Amounts of two currencies are never added up."""

    amount: float
    currency: str

    def __str__(self) -> str:
        """``$12.50`` for US dollars, ``12.50 EUR`` for any other currency."""
        return usd(self.amount) if self.currency == semconv.CURRENCY_USD else f"{self.amount:,.2f} {self.currency}"

    @property
    def exact(self) -> str:
        """``12.50 USD``: the amount and its code, as a computation shows it."""
        return f"{self.amount:,.2f} {self.currency}"

    def to_json(self) -> dict[str, Any]:
        return {"amount": self.amount, "currency": self.currency}


@dataclass(frozen=True, kw_only=True)
class ToldStep:
    """One LLM or tool call, with what a person needs to follow it."""

    step: int
    kind: str  # "llm" | "tool"
    name: str  # the model, or the tool
    span_id: str
    start_ns: int
    end_ns: int
    caption: str  # one plain sentence
    arguments: Mapping[str, Any]  # tool calls
    result: str  # tool calls: the result as recorded
    said: str  # LLM calls: what the model answered in words
    asked_for: tuple[str, ...]  # LLM calls: the tool calls it asked for, as "name(k=v, ...)"
    cost_usd: float | None  # as recorded on the span (a side effect's cost in USD, or the call's token cost)
    charge: Money | None  # tool calls: what the call charged, in its declared currency
    side_effect: bool
    decisions: tuple[Decision, ...]
    refused: bool  # a policy decision denied it: it did not run, nothing was charged
    failed: bool
    error: str

    @property
    def when(self) -> str:
        return utc(self.start_ns)


@dataclass(frozen=True, kw_only=True)
class Side:
    """One side of a contradiction: what it is ("asked"), the value, where it is recorded."""

    label: str
    value: str
    step: int | None
    path: str
    context: str = ""  # the text it was found in (the request), or the call it was given to


@dataclass(frozen=True, kw_only=True)
class Contradiction:
    mode: str
    mode_name: str
    explanation: str
    left: Side
    right: Side


def utc(ns: int) -> str:
    """A span time as an ISO 8601 UTC instant with milliseconds."""
    return dt.datetime.fromtimestamp(ns / 1e9, tz=dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def tell(spans: Iterable[SpanRecord], *, halted: bool = False) -> tuple[ToldStep, ...]:
    """Every numbered step of the run, in order, each with its caption; ``halted``: the store says
    the run was halted (a halt the spans themselves may not show)."""
    spans = list(spans)
    view = run_view(spans)
    by_id = {s.span_id: s for s in spans}
    return tuple(_told(step, by_id.get(step.span_id), halted or view.halted) for step in view.steps)


def _told(step: Step, span: SpanRecord | None, halted: bool) -> ToldStep:
    attrs: Mapping[str, str] = span.attributes if span else {}
    refused = any(d.outcome == "deny" for d in step.decisions)
    return ToldStep(
        step=step.step, kind="tool" if step.is_tool else "llm", name=step.name, span_id=step.span_id,
        start_ns=span.start_ns if span else 0, end_ns=span.end_ns if span else 0,
        caption=caption(step, charge_of(attrs) if step.is_tool else None, halted=halted),
        arguments=dict(step.arguments), result=step.result, said=step.text,
        asked_for=tuple(call_words(c.name, c.arguments) for c in step.tool_calls),
        cost_usd=cost_of(attrs), charge=charge_of(attrs) if step.is_tool else None,
        side_effect=step.is_tool and step.acts, decisions=step.decisions,
        refused=refused, failed=step.failed, error=step.error,
    )


def cost_of(attributes: Mapping[str, str]) -> float | None:
    return _amount(attributes.get(semconv.COST_USD))


def charge_of(attributes: Mapping[str, str]) -> Money | None:
    """A tool call's charge: its declared amount and currency, else (recorded before currencies were)
    its ``agentreplay.cost.usd``."""
    currency = (attributes.get(semconv.COST_CURRENCY) or "").strip().upper()
    if currency:
        amount = _amount(attributes.get(semconv.COST_AMOUNT))
        return Money(amount, currency) if amount is not None else None
    usd_ = cost_of(attributes)
    return Money(usd_, semconv.CURRENCY_USD) if usd_ is not None else None


def _amount(raw: str | None) -> float | None:
    try:
        return float(raw) if raw else None
    except ValueError:
        return None


def usd(amount: float) -> str:
    """An amount for a person: cents for a charge, more digits for token costs."""
    return f"${amount:,.2f}" if amount >= 0.01 or amount == 0 else f"${amount:.6f}".rstrip("0")


def call_words(name: str, arguments: Mapping[str, Any]) -> str:
    """``book_flight(flight=TP125, day=Saturday)``: a call as a person reads it."""
    args = ", ".join(f"{k}={_plain(v)}" for k, v in arguments.items())
    return f"{name}({clip(args, 160)})"


def _plain(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _args_words(arguments: Mapping[str, Any]) -> str:
    return clip(", ".join(f"{k} {_plain(v)}" for k, v in arguments.items()), 160)


def past_tense(tool: str) -> str:
    """What the agent did with a tool, in one word (``book_flight`` -> "booked", ``issue_refund`` ->
    "refunded": the first word that is a known verb), else "called"."""
    words = key_words(tool)
    at = _verb_at(words)
    return _PAST[words[at]] if at is not None else "called"


def _verb_at(words: Sequence[str]) -> int | None:
    return next((i for i, w in enumerate(words) if w in _PAST), None)


def caption(step: Step, cost: Money | None, *, halted: bool = False) -> str:
    """One plain sentence for a step: what the agent did, what came of it."""
    if step.is_llm:
        return _llm_caption(step)
    args = _args_words(step.arguments)
    refused = next((d for d in step.decisions if d.outcome == "deny"), None)
    if refused is not None:
        why = refused.detail or refused.rule
        then = " The run was halted." if halted else ""
        return (f"The agent tried to call {step.name} ({args}); the manifest refused it ({why}), "
                f"so it did not run and nothing was charged.{then}")
    if step.halted:
        return f"The agent tried to call {step.name} ({args}), but the run was already halted."
    if step.failed:
        return f"The agent called {step.name} ({args}) and it failed: {clip(step.error or 'error', 160)}."
    verb = past_tense(step.name)
    words = key_words(step.name)
    at = _verb_at(words)
    thing = " ".join(words[at + 1:]) if at is not None else ""
    what = f"{verb} {_article(thing)}{thing} ({args})" if thing else (
        f"{verb} {step.name} ({args})" if verb == "called" else f"{verb} ({args})")
    charged = f" for {cost}" if cost is not None and cost.amount > 0 else ""
    effect = " This acted on the world." if step.acts else ""
    result = f" It answered: {clip(' '.join(step.result.split()), 140)}" if step.result and not charged else ""
    return f"The agent {what}{charged}.{effect}{result}"


def _article(noun: str) -> str:
    """ "a flight", "an order", and no article for a plural ("flights")."""
    if noun.endswith("s"):
        return ""
    return "an " if noun[:1].lower() in "aeiou" else "a "


def _llm_caption(step: Step) -> str:
    model = f" ({step.name})" if step.name else ""
    if step.halted:
        return f"The agent tried to ask the model{model}, but the run was already halted."
    if step.failed:
        return f"The agent asked the model{model} what to do, and the call failed: {clip(step.error or 'error', 160)}."
    if step.tool_calls:
        calls = " and ".join(call_words(c.name, c.arguments) for c in step.tool_calls)
        return f"The agent asked the model{model} what to do; it chose to call {clip(calls, 300)}."
    if step.text:
        return f"The agent asked the model{model} what to do; it answered: “{clip(' '.join(step.text.split()), 200)}”"
    return f"The agent asked the model{model} what to do."


# --- the contradiction ---------------------------------------------------------------------------
def contradictions(verdict: Verdict | None, told: Sequence[ToldStep], request: str = "") -> tuple[Contradiction, ...]:
    """Each failure mode's evidence as two sides, the verdict's own culprit's first; ``request``
    (what the user asked) is quoted beside what the request side says."""
    if verdict is None:
        return ()
    hits = sorted(verdict.modes, key=lambda h: h.culprit != verdict.culprit)
    found = (_contradiction(h, told, request) for h in hits)
    return tuple(c for c in found if c is not None)


def _contradiction(hit: ModeHit, told: Sequence[ToldStep], request: str) -> Contradiction | None:
    if not hit.evidence:
        return None
    by_step = {s.step: s for s in told}
    first, last = hit.evidence[0], hit.evidence[-1]
    if len(hit.evidence) >= 2:
        left, right = _side(first, by_step, request), _side(last, by_step, request)
    else:  # one fact (a refusal): the rule on one side, the call it refused on the other
        step = by_step.get(first.step) if first.step is not None else None
        left = Side(label="the signed manifest allows", value=first.note or first.value, step=first.step,
                    path=first.path, context=f"rule {first.value}")
        right = Side(label="the agent tried", value=call_words(step.name, step.arguments) if step else first.value,
                     step=first.step, path=semconv.GEN_AI_TOOL_CALL_ARGUMENTS if step else first.path)
    fm = hit.failure_mode
    return Contradiction(mode=hit.mode, mode_name=fm.name, explanation=hit.explanation, left=left, right=right)


def _side(evidence: Evidence, by_step: Mapping[int, ToldStep], request: str) -> Side:
    step = by_step.get(evidence.step) if evidence.step is not None else None
    note = evidence.note.strip()
    if note == "the request says" or evidence.path == semconv.RUN_INPUT:
        label, context = "asked", request
    elif evidence.path.startswith(semconv.GEN_AI_TOOL_CALL_ARGUMENTS) and step is not None:
        key = evidence.path[len(semconv.GEN_AI_TOOL_CALL_ARGUMENTS):].lstrip(".")
        verb = past_tense(step.name)
        label = verb if verb != "called" else f"{step.name} got"
        label += f" ({key})" if key and verb != "called" else ""
        context = call_words(step.name, step.arguments)
    else:
        label, context = note or evidence.path, ""
    return Side(label=label, value=evidence.value, step=evidence.step, path=evidence.path, context=context)


def request_of(spans: Iterable[SpanRecord]) -> str:
    """What the user asked: the first user message the model saw, else the run's input."""
    quote = run_view(spans).request
    return quote.text if quote else ""
