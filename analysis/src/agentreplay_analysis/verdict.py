"""What an analysis says of a run: the verdict, its failure modes, the culprit step, the evidence,
the root cause and the fork that should fix it. Frozen records with one JSON form, which is
what the ``classifications`` table keeps (the collector stores it without reading it).
"""

from __future__ import annotations

import enum
import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from agentreplay_analysis.taxonomy import BY_ID, FailureMode

DETECTORS = "detectors"
LLM = "llm"
"""The two kinds of classifier: the deterministic detectors, and an LLM judge (one per model)."""


class Outcome(enum.StrEnum):
    FAILED = "failed"
    OK = "ok"
    UNSURE = "unsure"
    JUDGE_ERROR = "judge_error"  # the judge gave no valid answer (its raw text is kept)


@dataclass(frozen=True, kw_only=True)
class Culprit:
    """The step to blame: the one whose decision went wrong (for a bad tool call, the LLM call
    that asked for it), numbered as ``show``, ``replay`` and ``fork`` number steps."""

    step: int | None
    span_id: str
    name: str

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "span_id": self.span_id, "name": self.name}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Culprit:
        step = doc.get("step")
        return cls(step=int(step) if step is not None else None, span_id=str(doc.get("span_id") or ""),
                   name=str(doc.get("name") or ""))


@dataclass(frozen=True, kw_only=True)
class Evidence:
    """One recorded fact a finding rests on: where it is (step, span, attribute path) and its value, quoted."""

    step: int | None
    span_id: str
    path: str  # e.g. "gen_ai.tool.call.arguments.day"
    value: str
    note: str = ""  # what the value shows, e.g. "the request says"

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "span_id": self.span_id, "path": self.path, "value": self.value,
                "note": self.note}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Evidence:
        step = doc.get("step")
        return cls(step=int(step) if step is not None else None, span_id=str(doc.get("span_id") or ""),
                   path=str(doc.get("path") or ""), value=str(doc.get("value") or ""), note=str(doc.get("note") or ""))


@dataclass(frozen=True, kw_only=True)
class Fix:
    """A fix ``agentreplay fork`` can try: at LLM step ``at``, a system prompt or an added user message."""

    at: int
    system: str | None = None
    message: str | None = None

    def command(self, run_id: str) -> str:
        """The exact command line, quoted for a POSIX shell."""
        parts = ["agentreplay", "fork", run_id, "--at", str(self.at)]
        if self.system is not None:
            parts += ["--system", self.system]
        if self.message is not None:
            parts += ["--message", self.message]
        return shlex.join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"at": self.at, "system": self.system, "message": self.message}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Fix:
        return cls(at=int(doc["at"]), system=doc.get("system"), message=doc.get("message"))


@dataclass(frozen=True, kw_only=True)
class ModeHit:
    """One failure mode found in the run, by one detector or judge."""

    mode: str  # a MAST id, "FM-1.1"
    detector: str  # which detector (or "llm") found it
    explanation: str
    culprit: Culprit | None = None
    evidence: tuple[Evidence, ...] = ()
    fix: Fix | None = None

    @property
    def failure_mode(self) -> FailureMode:
        return BY_ID[self.mode]

    def to_json(self) -> dict[str, Any]:
        fm = self.failure_mode
        return {
            "mode": self.mode, "name": fm.name, "category": str(fm.category), "detector": self.detector,
            "explanation": self.explanation, "culprit": self.culprit.to_json() if self.culprit else None,
            "evidence": [e.to_json() for e in self.evidence], "fix": self.fix.to_json() if self.fix else None,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ModeHit:
        return cls(
            mode=str(doc["mode"]), detector=str(doc.get("detector") or ""),
            explanation=str(doc.get("explanation") or ""),
            culprit=Culprit.from_json(doc["culprit"]) if doc.get("culprit") else None,
            evidence=tuple(Evidence.from_json(e) for e in doc.get("evidence") or ()),
            fix=Fix.from_json(doc["fix"]) if doc.get("fix") else None,
        )


NO_CHAIN = ("it has no AgentReplay chain (another instrumentation's trace): nothing in it was verified, and "
            "nothing is claimed about tampering")
"""What a verdict on a foreign run (``unchained``) says of its chain: its note, beside ``verified: false``."""


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """One classifier's judgement of one run, as judged at chain head ``chain_hash``."""

    run_id: str
    outcome: Outcome
    classifier: str  # DETECTORS or LLM
    model: str = ""  # the judge's model id; "" for the detectors
    modes: tuple[ModeHit, ...] = ()
    culprit: Culprit | None = None
    root_cause: str = ""
    fix: Fix | None = None
    chain_hash: str = ""  # the run's last chain hash when judged
    chain_state: str = ""  # intact, unsealed, broken, ... (runs/show/verify's names)
    verified: bool = True  # False: judged with --allow-unverified, the chain did not verify
    partial: bool = False  # judged while the run was still in flight (--partial)
    prompt_sha256: str = ""  # the judge's prompt (LLM only)
    prompt_tokens: int = 0  # the judge's prompt, as its endpoint counted it (else estimated)
    context_cut: str = ""  # how the transcript was cut to fit the judge's context ("" if whole)
    error: str = ""  # why the judge gave no verdict (judge_error)
    raw: str = ""  # the judge's raw answer, kept when it failed validation
    elapsed_ms: float = 0.0
    notes: tuple[str, ...] = field(default=())
    expected: str = ""  # the expected outcome the run was held to, as kept (agentreplay.run.expected); "" none
    expected_met: bool | None = None  # whether the run met it (None: not held to one)

    @property
    def mode_ids(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(h.mode for h in self.modes))

    @property
    def judge(self) -> str:
        """The classifier as one name: ``detectors`` or ``llm:MODEL``."""
        return self.classifier if not self.model else f"{self.classifier}:{self.model}"

    def fork_command(self) -> str | None:
        return self.fix.command(self.run_id) if self.fix else None

    def with_chain(self, *, chain_state: str, verified: bool, partial: bool, problem: str = "",
                   unforkable: str = "") -> Verdict:
        """This verdict with what it knows of the run's chain (``problem``: why it did not verify;
        ``unforkable``: why the run cannot be forked, so its fix is said in words, not as a command)."""
        notes = self.notes + ((f"judged although its chain does not verify: {problem}",) if problem else ())
        fix = self.fix
        if unforkable and fix is not None:
            what = f"--system {fix.system!r}" if fix.system is not None else f"--message {fix.message!r}"
            notes += (f"no fork is offered: {unforkable}; the fix to try, at step {fix.at}: {what}",)
            fix = None
        return replace(self, chain_state=chain_state, verified=verified, partial=partial, notes=notes, fix=fix)

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "verdict": str(self.outcome), "classifier": self.classifier,
            "model": self.model, "modes": [h.to_json() for h in self.modes],
            "culprit": self.culprit.to_json() if self.culprit else None, "root_cause": self.root_cause,
            "fix": self.fix.to_json() if self.fix else None, "fork_command": self.fork_command(),
            "chain_hash": self.chain_hash, "chain_state": self.chain_state, "verified": self.verified,
            "partial": self.partial, "prompt_sha256": self.prompt_sha256, "prompt_tokens": self.prompt_tokens,
            "context_cut": self.context_cut,
            "error": self.error, "raw": self.raw, "elapsed_ms": self.elapsed_ms,
            "notes": list(self.notes),
            **({"expected": self.expected, "expected_met": self.expected_met} if self.expected else {}),
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Verdict:
        return cls(
            run_id=str(doc["run_id"]), outcome=Outcome(doc["verdict"]), classifier=str(doc["classifier"]),
            model=str(doc.get("model") or ""), modes=tuple(ModeHit.from_json(h) for h in doc.get("modes") or ()),
            culprit=Culprit.from_json(doc["culprit"]) if doc.get("culprit") else None,
            root_cause=str(doc.get("root_cause") or ""), fix=Fix.from_json(doc["fix"]) if doc.get("fix") else None,
            chain_hash=str(doc.get("chain_hash") or ""), chain_state=str(doc.get("chain_state") or ""),
            verified=bool(doc.get("verified", True)), partial=bool(doc.get("partial", False)),
            prompt_sha256=str(doc.get("prompt_sha256") or ""), prompt_tokens=int(doc.get("prompt_tokens") or 0),
            context_cut=str(doc.get("context_cut") or ""),
            error=str(doc.get("error") or ""), raw=str(doc.get("raw") or ""),
            elapsed_ms=float(doc.get("elapsed_ms") or 0.0), notes=tuple(doc.get("notes") or ()),
            expected=str(doc.get("expected") or ""),
            expected_met=bool(doc["expected_met"]) if doc.get("expected_met") is not None else None,
        )

    @classmethod
    def loads(cls, text: str) -> Verdict:
        return cls.from_json(json.loads(text))


def primary(hits: Sequence[ModeHit]) -> ModeHit | None:
    """The hit that explains the run: the earliest culprit step, then the taxonomy's order."""
    if not hits:
        return None
    order = {mode_id: i for i, mode_id in enumerate(BY_ID)}
    return min(hits, key=lambda h: (h.culprit is None or h.culprit.step is None,
                                    h.culprit.step if h.culprit and h.culprit.step is not None else 0,
                                    order.get(h.mode, 99)))
