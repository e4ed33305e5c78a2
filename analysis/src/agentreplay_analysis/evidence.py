"""The verdict a case's outputs rest on (its root cause, packets, walkthrough and regression test).

A case carries the verdicts stored on its run, but nothing in a case file stops its author from
adding, removing or editing one. So what is made from a case rests on:

* the detectors, run again offline on the case's spans (which the caller has verified): they
  need no one's word;
* an LLM judge's verdict only when the collector signed it with the transparency log's key, which
  the org certified, for this run as these spans end (:func:`~agentreplay_otel.transparency.verify_verdict`).

A judge may ADD failure modes (it reads what the detectors cannot); it never clears a failure the
detectors found, whatever it answered (a tool result can talk a judge into "ok"). Every other stored
verdict is ignored, and the combined verdict's notes say which and why.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentreplay_analysis.engine import detect
from agentreplay_analysis.expected import encode
from agentreplay_analysis.judging.floor import own
from agentreplay_analysis.transcript import chain_head, run_view
from agentreplay_analysis.verdict import DETECTORS, ModeHit, Outcome, Verdict
from agentreplay_client.models import StoredClassification
from agentreplay_otel.core import SpanRecord
from agentreplay_otel.transparency import ATTESTATION, CheckpointError, verify_verdict

COMBINED = f"{DETECTORS}+llm"
"""The classifier of a verdict to which a signed judge's verdict added modes."""


class CaseLike(Protocol):
    """What the verdict needs of a case (:class:`~agentreplay_incident.case.Case`)."""

    @property
    def run_id(self) -> str: ...

    @property
    def spans(self) -> Sequence[SpanRecord]: ...

    @property
    def classifications(self) -> Sequence[StoredClassification]: ...


@dataclass(frozen=True, kw_only=True)
class Weighed:
    """One stored verdict as a case's reader weighs it: whether the collector signed it, whether it counts."""

    index: int  # its position among the case's classifications
    judge: str  # "detectors", "llm:MODEL"
    outcome: str
    signed: bool
    used: bool
    why: str = ""  # why it does not count ("" when it does)
    forged: bool = False  # it carries a signature that does not verify: the case was edited

    def note(self) -> str:
        signed = "signed by the collector" if self.signed else "unsigned"
        return f"stored verdict {self.index} ({self.judge}: {self.outcome}, {signed}) ignored: {self.why}"

    def to_json(self) -> dict[str, object]:
        return {"index": self.index, "judge": self.judge, "verdict": self.outcome, "signed": self.signed,
                "used": self.used, "why": self.why}


def weigh(run_id: str, spans: Sequence[SpanRecord], classifications: Sequence[StoredClassification],
          org_key: Ed25519PublicKey | None) -> tuple[list[Verdict], list[Weighed]]:
    """The judges' verdicts that count (signed by a log key the org certified, for this run as these
    spans end, with an answer), and how each stored verdict was weighed."""
    head = chain_head(spans)
    used: list[Verdict] = []
    weighed: list[Weighed] = []
    for index, stored in enumerate(classifications):
        judge = stored.classifier if not stored.model else f"{stored.classifier}:{stored.model}"

        def skip(why: str, *, signed: bool = False, forged: bool = False,
                 _i: int = index, _judge: str = judge, _outcome: str = stored.verdict) -> None:
            weighed.append(Weighed(index=_i, judge=_judge, outcome=_outcome, signed=signed, used=False, why=why,
                                   forged=forged))

        try:
            doc = json.loads(stored.verdict_json)
        except ValueError:
            skip("its verdict is not JSON")
            continue
        if not isinstance(doc, dict) or ATTESTATION not in doc:
            skip("not signed by the collector: anyone could have written it")
            continue
        if org_key is None:
            skip("no org key to check the collector's signature against", signed=True)
            continue
        try:
            body = verify_verdict(doc, org_key)
            verdict = Verdict.from_json(body)
        except CheckpointError as exc:
            skip(f"its signature does not verify: {exc}", forged=True)
            continue
        except (KeyError, TypeError, ValueError) as exc:
            skip(f"signed, but not a verdict: {exc}", signed=True)
            continue
        if verdict.run_id != run_id:
            skip(f"signed for run {verdict.run_id}, not this one", signed=True, forged=True)
        elif verdict.chain_hash != head:
            skip("signed for the run as it ended elsewhere (another chain head): it judged other spans", signed=True)
        elif verdict.classifier == DETECTORS:
            skip("the detectors are run again on the case's spans", signed=True)
        elif verdict.outcome is Outcome.JUDGE_ERROR:
            skip("the judge gave no verdict", signed=True)
        else:
            used.append(verdict)
            weighed.append(Weighed(index=index, judge=verdict.judge, outcome=str(verdict.outcome), signed=True,
                                   used=True))
    return used, weighed


def combine(found: Verdict, judges: Sequence[Verdict]) -> Verdict:
    """The detectors' verdict with what signed judges add: their modes the detectors did not find. A
    judge that answered ok or unsure changes nothing; one that found a failure the detectors did not
    makes the run failed, on its word (the verdict's classifier says so)."""
    said = {id(j): own(j) for j in judges}  # what each judge itself answered (a stored verdict keeps the floor)
    failing = [j for j in judges if said[id(j)][0] is Outcome.FAILED and said[id(j)][1]]
    notes = [f"the judge {j.judge} answered {said[id(j)][0]}: a judge never clears a failure the detectors found"
             for j in judges if said[id(j)][0] is not Outcome.FAILED and found.outcome is Outcome.FAILED]
    seen = set(found.mode_ids)
    added: list[ModeHit] = []
    for judge in failing:
        for hit in judge.modes:
            if hit.mode in said[id(judge)][1] and hit.mode not in seen:
                seen.add(hit.mode)
                added.append(hit)
    if not added:
        return replace(found, notes=found.notes + tuple(notes))
    by = ", ".join(dict.fromkeys(j.judge for j in failing))
    also = "; ".join(f"{h.mode} at step {h.culprit.step if h.culprit and h.culprit.step is not None else '?'}"
                     for h in added)
    model = failing[0].model
    if found.outcome is Outcome.FAILED:
        return replace(found, classifier=COMBINED, model=model, modes=found.modes + tuple(added),
                       root_cause=f"{found.root_cause} The LLM judge ({by}) also found: {also}.",
                       notes=found.notes + tuple(notes))
    first = failing[0]
    return replace(found, outcome=Outcome.FAILED, classifier=COMBINED, model=model, modes=tuple(added),
                   culprit=first.culprit, fix=first.fix,
                   root_cause=f"{first.root_cause} (found by the LLM judge {by}, whose verdict the collector "
                              f"signed; the detectors found no failure mode)",
                   notes=found.notes + tuple(notes))


def verdict_of(case: CaseLike, org_key: Ed25519PublicKey | None = None, *, expected: Any = None) -> Verdict:
    """The verdict a checked case's outputs rest on: the detectors run now on its spans (held to
    ``expected`` when given, else to the run span's own expected outcome), plus what the judges' verdicts
    the collector signed add (none without ``org_key``); notes name each stored verdict ignored and why."""
    judges, weighed = weigh(case.run_id, case.spans, case.classifications, org_key)
    view = run_view(list(case.spans))
    if expected is not None:
        view = replace(view, expected=encode(expected))
    verdict = combine(detect(view), judges)
    ignored = [w.note() for w in weighed if not w.used and not (w.signed and w.judge == DETECTORS)]
    return replace(verdict, notes=verdict.notes + tuple(ignored))
