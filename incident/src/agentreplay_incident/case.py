"""A case: one recorded run in one file, checkable offline with the org public key alone.

A case carries everything a reader needs to trust a run without the store or the collector:
its spans (chain links and seal included), the org's certificates of the agent keys that
sealed them, the signed manifest the run was under, every policy decision, the stored
verdicts, and the transparency log's inclusion proofs with their signed checkpoints.

:func:`collect` reads it from a store or a collector (a :class:`~agentreplay_client.reader.RunSource`),
:func:`write` and :func:`read` move it to and from a file (``agentreplay-case/1``, one JSON document),
:func:`check` proves what can be proven with the org key, and :class:`CaseReader` serves it as a
read-only :class:`~agentreplay_client.reader.RunSource`, so ``replay``, ``fork`` and ``analyze`` take
a case file where they take a run id.

What :func:`check` proves: the spans are the run the agent sealed with a key the org
certified (nothing edited, added, removed or cut); the manifest is the one the org signed
and the one the seal names; each decision the agent made is the one its chained spans record,
and every decision names that manifest; each inclusion proof leads to a checkpoint signed by a
log key the org certified, and its leaf ends where the spans end; each verdict the collector
signed with that log key is the one it signed, for this run. What it does not prove: the run
row's figures (the collector's summary), the collector's own decisions beyond naming a chained
span and the manifest, and unsigned verdicts (anyone can add one: what is made from a case uses
the detectors run again and signed verdicts only, :mod:`~agentreplay_analysis.evidence`).

A case whose certificates show the org certified a log key (the log key's certificate it carries,
or one in its proofs or signed verdicts) needs its log proof when ``check`` is asked to require
one by default (``verify``'s ``--require-log-proof``): a stripped proof then fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentreplay_analysis.evidence import weigh
from agentreplay_client.errors import StoreError
from agentreplay_client.models import (
    ChainStatus,
    DecisionRecord,
    RunSummary,
    StoredClassification,
    TraceSummary,
    span_from_json,
    span_to_json,
    tool_of,
    verdict_matches,
)
from agentreplay_client.reader import LogReader, RunSource
from agentreplay_otel.core import (
    SPAN_ID_FORM,
    TRACE_ID_FORM,
    ChainReport,
    CheckpointError,
    InclusionProof,
    Manifest,
    ManifestError,
    Recording,
    SignedCheckpoint,
    SpanRecord,
    chain_head,
    decode_leaf,
    is_parent_span_id,
    is_span_id,
    is_trace_id,
    key_id,
    manifest_sha256,
    merkle,
    parse_manifest,
    recording_from_spans,
    semconv,
    verify,
    verify_manifest,
)
from agentreplay_otel.transparency import ATTESTATION, verify_log_certificate

CASE_FORMAT = "agentreplay-case/1"
UNSIGNED_NOTICE = ("UNSIGNED: this run was recorded without an agent key, so nothing in it is signed. "
                   "It is not evidence: anyone could have written it.")
"""The first line of every output made from an unsigned run (case file, packets, walkthrough, test)."""
NOTICE = "notice"
COLLECTOR_SOURCE = "collector"
"""The source of a decision the collector made itself (not one recorded in the agent's spans)."""


class CaseError(Exception):
    """A case file that cannot be read or collected: missing, truncated, malformed, another format."""


# --- the case ----------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Case:
    """One run and everything needed to trust it offline (see the module's docstring)."""

    run_id: str
    exported_ns: int
    summary: RunSummary  # the run's row (the collector's summary: not proven by the chain)
    spans: tuple[SpanRecord, ...]  # every stored span of the run, chain attributes included
    certificates: Mapping[str, str]  # agent key id -> the org's identity token for it
    manifest: str | None  # the signed manifest in force (its JSON text as registered), if any
    decisions: tuple[DecisionRecord, ...]  # every policy decision on the run, in time order
    classifications: tuple[StoredClassification, ...]  # stored verdicts, newest last
    inclusion: tuple[Mapping[str, Any], ...] = ()  # InclusionProof.to_json() of each leaf; () with no log
    log_certificate: Mapping[str, Any] | None = None  # the org's certificate of the log key; None with no key

    @property
    def recording(self) -> Recording:
        return recording_from_spans(self.spans)

    @property
    def manifest_sha256(self) -> str:
        """The manifest the run says it ran under: its sealed run span's, else its row's."""
        root = self.root
        named = root.attributes.get(semconv.MANIFEST_SHA256, "") if root is not None else ""
        return named or self.summary.manifest_sha256

    @property
    def root(self) -> SpanRecord | None:
        return next((s for s in reversed(self.spans) if s.is_root), None)

    @property
    def signed(self) -> bool:
        """Whether its run span carries a seal (the run was recorded with an agent key). An unsigned
        run can be read and analysed like any other; what is made from it says it is not evidence."""
        root = self.root
        return bool(root is not None and root.attributes.get(semconv.CHAIN_SEAL))

    @property
    def manifest_obj(self) -> Manifest | None:
        """The manifest carried, parsed (its signature is :func:`check`'s business); None without one."""
        if self.manifest is None:
            return None
        body = _manifest_body(self.manifest)
        return parse_manifest(body)

    def to_json(self) -> dict[str, Any]:
        return {
            **({} if self.signed else {NOTICE: UNSIGNED_NOTICE}),
            "format": CASE_FORMAT,
            "run_id": self.run_id,
            "exported_ns": str(self.exported_ns),
            "run": self.summary.to_json(),
            "spans": [span_to_json(s) for s in self.spans],
            "certificates": dict(sorted(self.certificates.items())),
            "manifest": self.manifest,
            "decisions": [decision_to_json(d) for d in self.decisions],
            "classifications": [c.to_json() for c in self.classifications],
            "inclusion": [dict(p) for p in self.inclusion],
            "log_certificate": dict(self.log_certificate) if self.log_certificate is not None else None,
        }

    @classmethod
    def from_json(cls, doc: Any) -> Case:
        """A case from its JSON document; :class:`CaseError` naming what is wrong."""
        if not isinstance(doc, dict):
            raise CaseError("not a case file: expected a JSON object")
        if doc.get("format") != CASE_FORMAT:
            raise CaseError(f"not a case file: format {doc.get('format')!r}, expected {CASE_FORMAT!r}")
        part = "run"
        try:
            run_id = str(doc["run_id"]).lower()
            exported_ns = int(doc["exported_ns"])
            summary = RunSummary.from_json(doc["run"])
            part = "spans"
            spans = tuple(span_from_json(s) for s in _list(doc, "spans"))
            part = "certificates"
            certificates = {str(k): _string(v) for k, v in _dict(doc, "certificates").items()}
            part = "manifest"
            manifest = doc.get("manifest")
            if manifest is not None and not isinstance(manifest, str):
                raise TypeError("the manifest is the signed manifest's JSON text")
            part = "decisions"
            decisions = tuple(decision_from_json(d) for d in _list(doc, "decisions"))
            part = "classifications"
            classifications = tuple(StoredClassification.from_json(c) for c in _list(doc, "classifications"))
            part = "inclusion"
            inclusion = tuple(_dict({"p": p}, "p") for p in _list(doc, "inclusion"))
            log_certificate = _dict(doc, "log_certificate") if doc.get("log_certificate") is not None else None
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CaseError(f"malformed case file ({part}): {type(exc).__name__}: {exc}") from exc
        _check_ids(run_id, summary, spans, decisions, classifications)
        return cls(run_id=run_id, exported_ns=exported_ns, summary=summary, spans=spans,
                   certificates=certificates, manifest=manifest, decisions=decisions,
                   classifications=classifications, inclusion=inclusion, log_certificate=log_certificate)


def _check_ids(run_id: str, summary: RunSummary, spans: Sequence[SpanRecord], decisions: Sequence[DecisionRecord],
               classifications: Sequence[StoredClassification]) -> None:
    """Every id a case carries in its stored form (:mod:`agentreplay_otel.ids`), else :class:`CaseError`:
    ids name files and are written into generated tests, so a hand-written one is refused on reading."""
    wrong: list[str] = []
    if not is_trace_id(run_id):
        wrong.append("run_id")
    if not is_trace_id(summary.run_id) or (summary.replay_of and not is_trace_id(summary.replay_of)):
        wrong.append("run (its run_id or replay_of)")
    for n, s in enumerate(spans):
        if not (is_trace_id(s.trace_id) and is_span_id(s.span_id) and is_parent_span_id(s.parent_span_id)):
            wrong.append(f"spans[{n}] (its trace, span or parent span id)")
            break
    if any(not is_trace_id(d.run_id) or not is_parent_span_id(d.span_id) for d in decisions):  # "" or an id
        wrong.append("decisions (a run_id or span_id)")
    if any(not is_trace_id(c.run_id) or not is_parent_span_id(c.culprit_span_id) for c in classifications):
        wrong.append("classifications (a run_id or culprit_span_id)")
    if wrong:
        raise CaseError(f"malformed case file: an id that is not in its stored form (run and trace ids "
                        f"{TRACE_ID_FORM}, span ids {SPAN_ID_FORM}) in {', '.join(wrong)}")


def decision_to_json(d: DecisionRecord) -> dict[str, Any]:
    return {"time_ns": str(d.time_ns), "run_id": d.run_id, "span_id": d.span_id, "agent_id": d.agent_id,
            "tool": d.tool, "decision": d.decision, "rule": d.rule, "manifest_sha256": d.manifest_sha256,
            "detail": d.detail, "source": d.source}


def decision_from_json(doc: Mapping[str, Any]) -> DecisionRecord:
    return DecisionRecord(
        time_ns=int(doc["time_ns"]), run_id=str(doc["run_id"]).lower(), span_id=str(doc["span_id"]),
        agent_id=str(doc["agent_id"]), tool=str(doc["tool"]), decision=str(doc["decision"]), rule=str(doc["rule"]),
        manifest_sha256=str(doc["manifest_sha256"]), detail=str(doc["detail"]), source=str(doc["source"]),
    )


def _list(doc: Mapping[str, Any], key: str) -> list[Any]:
    value = doc[key]
    if not isinstance(value, list):
        raise TypeError(f"{key} must be a list")
    return value


def _dict(doc: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = doc[key]
    if not isinstance(value, dict):
        raise TypeError(f"{key} must be an object")
    return value


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("expected a string")
    return value


def _manifest_body(text: str) -> dict[str, Any]:
    try:
        signed = json.loads(text)
    except ValueError as exc:
        raise ManifestError(f"the case's manifest is not JSON: {exc}") from exc
    body = signed.get("manifest") if isinstance(signed, dict) else None
    if not isinstance(body, dict):
        raise ManifestError("the case's manifest is not a signed manifest")
    return body


# --- file ----------------------------------------------------------------------------------------------
def write(case: Case, path: Path) -> int:
    """Write the case as one JSON file (atomically: a reader never sees half of one); its size in bytes."""
    data = (json_text(case.to_json(), indent=1) + "\n").encode("utf-8")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return len(data)


def json_text(doc: Mapping[str, Any], *, indent: int) -> str:
    """``doc`` as indented JSON; when it opens with an UNSIGNED notice, the notice is on the first line."""
    text = json.dumps(doc, indent=indent, ensure_ascii=False)
    return "{" + text[1:].lstrip() if next(iter(doc), None) == NOTICE else text


def read(path: Path) -> Case:
    """A case from its file; :class:`CaseError` (one line) for a missing, truncated or malformed file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CaseError(f"cannot read the case file {path}: {exc}") from exc
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise CaseError(f"{path}: not a whole JSON document (truncated or corrupted?): {exc}") from exc
    try:
        return Case.from_json(doc)
    except CaseError as exc:
        raise CaseError(f"{path}: {exc}") from exc


# --- collecting from a store or a collector -------------------------------------------------------------
def collect(source: RunSource, run_id: str) -> Case:
    """Everything about ``run_id`` that a case carries, read from ``source`` (a store opened directly or
    the collector's read API: its runs, records, verdicts and log). A run not (yet) in the log, or a
    deployment without a log key, gives a case without inclusion proofs."""
    summary = source.get_run(run_id)
    if summary is None:
        raise CaseError(f"no run {run_id} in the store")
    spans = source.get_run_spans(run_id)
    if not spans:
        raise CaseError(f"run {run_id} has no stored spans")
    records, keeper, log = source.records(), source.verdicts(), source.log()
    if records is None or keeper is None or log is None:
        raise CaseError(f"cannot collect a case from {type(source).__name__}: it keeps no records, verdicts and log "
                        "beside its runs (a store or a collector does)")
    kids = sorted({s.attributes.get(semconv.IDENTITY_KID, "") for s in spans} - {""})
    certificates = {kid: cert for kid in kids if (cert := source.get_agent_certificate(kid))}
    draft = Case(run_id=run_id, exported_ns=time.time_ns(), summary=summary, spans=tuple(spans),
                 certificates=certificates, manifest=None, decisions=(), classifications=())
    digest = draft.manifest_sha256
    verdicts = sorted(keeper.classifications(run_id), key=lambda c: c.time_ns)
    signed = _latest_checkpoint(log)
    return Case(
        run_id=run_id, exported_ns=draft.exported_ns, summary=summary, spans=tuple(spans),
        certificates=certificates,
        manifest=records.manifest(digest) if digest else None,
        decisions=tuple(sorted(records.decision_records(run_id), key=lambda d: d.time_ns)),
        classifications=tuple(verdicts),
        inclusion=tuple(inclusion_proofs(log, run_id, signed)),
        log_certificate=dict(signed.certificate) if signed is not None else None,
    )


def _latest_checkpoint(log: LogReader) -> SignedCheckpoint | None:
    try:
        return log.checkpoint()
    except StoreError:  # a collector without the log's routes
        return None


def inclusion_proofs(log: LogReader, run_id: str, signed: SignedCheckpoint | None = None) -> list[dict[str, Any]]:
    """Each of the run's leaves with its inclusion proof in the latest signed checkpoint (or ``signed``)
    (none: no log key is configured, or the run is not in a signed checkpoint yet)."""
    signed = signed if signed is not None else _latest_checkpoint(log)
    if signed is None:
        return []
    proven = log.run_proofs(run_id, signed.checkpoint.size)
    return [InclusionProof(checkpoint=signed, index=entry.index, leaf=entry.leaf, proof=tuple(path)).to_json()
            for entry, path in proven]


# --- checking offline ---------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class CaseCheck:
    """What :func:`check` found: ``problems`` (empty when the case verifies), what each part proved
    (``proven``), and what could not be checked (``notes``: no log proof, no org key)."""

    run_id: str
    chain: ChainReport | None
    problems: tuple[str, ...] = ()
    proven: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    log_indexes: tuple[int, ...] = ()  # the leaves whose inclusion was proven

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "ok": self.ok, "problems": list(self.problems), "proven": list(self.proven),
                "notes": list(self.notes), "log_indexes": list(self.log_indexes)}


@dataclass
class _Findings:
    problems: list[str] = field(default_factory=list)
    proven: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def check(case: Case, org_key: Ed25519PublicKey | None, *, require_log_proof: bool | None = False) -> CaseCheck:
    """Check a case offline. With the org key: the chain and its seal against the agent key the org
    certified (a seal is required), the manifest's signature, the decisions against the chained spans,
    each inclusion proof against a log key the org certified, and each verdict the collector signed.
    Without it (``None``), only what needs no key: the chain's links, and that decisions, manifest and
    proofs agree with the spans. ``require_log_proof``: a case without a log proof fails (True), passes
    with a note (False), or fails when its certificates show the org certified a log key (None)."""
    found = _Findings()
    report = _check_spans(case, org_key, found)
    if report is not None and report.intact:
        digest = _check_manifest(case, org_key, found)
        _check_decisions(case, digest, found)
        indexes = _check_inclusion(case, org_key, found, required=_proof_required(case, org_key, require_log_proof))
        _check_verdicts(case, org_key, found)
    else:
        indexes = ()
    if org_key is None:
        found.notes.append("no org key: seals, certificates and signatures were not checked")
    return CaseCheck(run_id=case.run_id, chain=report, problems=tuple(found.problems), proven=tuple(found.proven),
                     notes=tuple(found.notes), log_indexes=indexes)


def check_as_recorded(case: Case, org_key: Ed25519PublicKey | None) -> CaseCheck:
    """What an incident or a regression test needs of a case: a signed run checked against the org
    key, which is then required; a run recorded without keys (no seal) checked without it, for its
    chain's links. With a key given, the run must be signed by it. :class:`CaseError` for a signed
    run and no key; the returned check's ``problems`` for anything else."""
    if org_key is None and case.signed:
        raise CaseError(f"run {case.run_id} is signed: give the org public key (--org-key or "
                        f"${semconv.ENV_ORG_PUBLIC_KEY}) to check it against")
    found = check(case, org_key)
    if org_key is not None and not case.signed:
        return CaseCheck(run_id=case.run_id, chain=found.chain, problems=(
            f"run {case.run_id} was recorded without an agent key (unsigned), so it cannot be checked against "
            f"the org key; without one (no --org-key, ${semconv.ENV_ORG_PUBLIC_KEY} unset) what is made from it "
            "is marked UNSIGNED",), notes=found.notes)
    return found


def read_unsigned(path: Path) -> Case:
    """An unsigned run's case, for its regression test: its chain's links checked; a signed case is
    refused here (it is checked against the org key instead)."""
    case = read(path)
    if case.signed:
        raise CaseError(f"{path} is a signed run's case: check it against the org public key")
    found = check(case, None)
    if not found.ok:
        raise CaseError(f"{path} does not verify: {'; '.join(found.problems)}")
    return case


def _check_spans(case: Case, org_key: Ed25519PublicKey | None, found: _Findings) -> ChainReport | None:
    if not case.spans:
        found.problems.append("the case holds no spans")
        return None
    others = sorted({s.trace_id for s in case.spans} - {case.run_id})
    if others or case.summary.run_id != case.run_id:
        found.problems.append(f"the case mixes runs: {', '.join(others or [case.summary.run_id])} beside {case.run_id}")
        return None
    if org_key is None:
        report = verify(case.spans)
    else:
        report = verify(case.spans, org_key=org_key, certificates=dict(case.certificates), require_seal=True)
    if not report.intact:
        where = f" at seq {report.seq}" + (f" ({report.span_name})" if report.span_name else "") \
            if report.seq is not None else ""
        found.problems.append(f"chain {report.problem}{where}: {report.detail}")
    elif org_key is not None:
        found.proven.append(f"chain intact over {report.span_count} span(s), sealed by an agent key the org certified")
    else:
        found.proven.append(f"chain intact over {report.span_count} span(s) (seal not checked)")
    return report


def _check_manifest(case: Case, org_key: Ed25519PublicKey | None, found: _Findings) -> str:
    """The manifest the sealed run names, checked against the one carried; its sha256 ("" for none)."""
    named = case.root.attributes.get(semconv.MANIFEST_SHA256, "") if case.root is not None else ""
    if case.manifest is None:
        if named:
            found.problems.append(f"the run ran under manifest {named[:16]}…, and the case does not carry it")
        return named
    try:
        body = verify_manifest(json.loads(case.manifest), org_key) if org_key is not None else \
            _manifest_body(case.manifest)
    except (ValueError, ManifestError) as exc:
        found.problems.append(f"manifest refused: {exc}")
        return named
    digest = manifest_sha256(body)
    if digest != named:
        found.problems.append(f"the case's manifest is {digest[:16]}…, the sealed run names "
                              f"{named[:16] + '…' if named else 'none'}")
        return named
    found.proven.append("manifest signed by the org key, the one the seal names" if org_key is not None
                        else "manifest is the one the run names (signature not checked)")
    return digest


def _recorded_decisions(spans: Sequence[SpanRecord]) -> dict[tuple[str, int], DecisionRecord]:
    """The decisions the agent's chained spans record (their policy events), as the collector stores them."""
    recorded: dict[tuple[str, int], DecisionRecord] = {}
    for span in spans:
        tool = tool_of(span.name, span.attributes) or ""
        for event in span.events:
            if event.name != semconv.EVENT_POLICY_DECISION:
                continue
            ea = event.attributes
            recorded[(span.span_id, event.time_ns)] = DecisionRecord(
                time_ns=event.time_ns, run_id=span.trace_id, span_id=span.span_id,
                agent_id=span.resource.get(semconv.AGENT_ID, ""), tool=ea.get(semconv.GEN_AI_TOOL_NAME, tool),
                decision=ea.get(semconv.POLICY_DECISION, ""), rule=ea.get(semconv.POLICY_RULE, ""),
                manifest_sha256=ea.get(semconv.MANIFEST_SHA256, ""), detail=ea.get(semconv.POLICY_DETAIL, ""),
                source=ea.get(semconv.POLICY_SOURCE, ""),
            )
    return recorded


_DECISION_FIELDS = ("decision", "rule", "tool", "manifest_sha256", "detail", "source")


def _check_decisions(case: Case, digest: str, found: _Findings) -> None:
    recorded = _recorded_decisions(case.spans)
    span_ids = {s.span_id for s in case.spans}
    for n, d in enumerate(case.decisions):
        where = f"decision {n} ({d.decision} {d.tool or 'call'} by {d.rule or d.source})"
        if d.run_id != case.run_id or d.span_id not in span_ids:
            found.problems.append(f"{where} is about a span that is not in this run")
            return
        if d.manifest_sha256 and digest and d.manifest_sha256 != digest:
            found.problems.append(f"{where} names manifest {d.manifest_sha256[:16]}…, not the run's {digest[:16]}…")
            return
        if d.source == COLLECTOR_SOURCE:
            continue  # the collector's own judgement of a chained span: not recorded in the chain
        match = recorded.get((d.span_id, d.time_ns))
        if match is None:
            found.problems.append(f"{where} is not recorded in the run's chained spans")
            return
        differs = [f for f in _DECISION_FIELDS if getattr(d, f) != getattr(match, f)]
        if differs:
            found.problems.append(f"{where} differs from the one its chained span records ({', '.join(differs)})")
            return
    agent = sum(1 for d in case.decisions if d.source != COLLECTOR_SOURCE)
    missing = len(recorded) - len({(d.span_id, d.time_ns) for d in case.decisions if d.source != COLLECTOR_SOURCE})
    if missing > 0:
        found.problems.append(f"{missing} decision(s) recorded in the chained spans are missing from the case")
        return
    found.proven.append(f"{agent} agent decision(s) match the chained spans; "
                        f"{len(case.decisions) - agent} collector decision(s) name chained spans and the manifest")


def log_certificates(case: Case) -> list[Mapping[str, Any]]:
    """The log key certificates the case shows (the one it carries, a proof's checkpoint's, a signed
    verdict's), unchecked: a verifier checks them against its org key, an exporter only asks whether
    the collector keeps a log (then a case without its proof will be refused)."""
    found: list[Any] = [case.log_certificate]
    for doc in case.inclusion:
        checkpoint = doc.get("checkpoint")
        found.append(checkpoint.get("certificate") if isinstance(checkpoint, Mapping) else None)
    for stored in case.classifications:
        with contextlib.suppress(ValueError):
            verdict = json.loads(stored.verdict_json)
            attestation = verdict.get(ATTESTATION) if isinstance(verdict, dict) else None
            found.append(attestation.get("certificate") if isinstance(attestation, Mapping) else None)
    return [c for c in found if isinstance(c, Mapping)]


def certified_log_key(case: Case, org_key: Ed25519PublicKey) -> str:
    """The id of a log key the org certified, as the case shows it (the log key's certificate it
    carries, a proof's checkpoint, a signed verdict); "" when it shows none."""
    for certificate in log_certificates(case):
        with contextlib.suppress(CheckpointError):
            return key_id(verify_log_certificate(certificate, org_key))
    return ""


def _proof_required(case: Case, org_key: Ed25519PublicKey | None, asked: bool | None) -> str:
    """Why this case must carry a log proof ("" when it need not)."""
    if asked is not None:
        return "a log proof is required (--require-log-proof)" if asked else ""
    kid = certified_log_key(case, org_key) if org_key is not None else ""
    return f"the org certified log key {kid}, as the case's certificates show, so a log proof is required" \
        if kid else ""


def _check_inclusion(case: Case, org_key: Ed25519PublicKey | None, found: _Findings, *,
                     required: str = "") -> tuple[int, ...]:
    if not case.inclusion:
        if required:
            found.problems.append(f"the transparency-log proof is missing (stripped, withheld, or exported before a "
                                  f"checkpoint covered the run): {required} (--no-require-log-proof accepts a case "
                                  "without one)")
        else:
            found.notes.append("no transparency-log proof: the deployment has no log key, or the run was exported "
                               "before a checkpoint covered it")
        return ()
    head = chain_head(case.spans)
    indexes: list[int] = []
    latest = None
    for doc in case.inclusion:
        try:
            proof = InclusionProof.from_json(doc)
            if org_key is not None:
                leaf = proof.verify(org_key)
            else:  # the proof against the checkpoint's root, the root's signature unchecked
                leaf = decode_leaf(proof.leaf)
                cp = proof.checkpoint.checkpoint
                merkle.verify_inclusion(merkle.leaf_hash(proof.leaf), proof.index, cp.size, proof.proof, cp.root)
        except (merkle.ProofError, CheckpointError, ValueError) as exc:
            found.problems.append(f"transparency-log proof refused: {exc}")
            return ()
        if leaf.run_id != case.run_id:
            found.problems.append(f"transparency-log proof {proof.index} is for run {leaf.run_id}, not this one")
            return ()
        indexes.append(proof.index)
        if latest is None or proof.index > latest[0]:
            latest = (proof.index, leaf, proof.checkpoint.checkpoint.size)
    assert latest is not None
    index, leaf, size = latest
    if leaf.head != head:
        found.problems.append(f"the log recorded the run ending at seq {leaf.head.seq} (hash {leaf.head.hash[:16]}…), "
                              f"the case's spans end at seq {head.seq} (hash {head.hash[:16]}…)")
        return ()
    found.proven.append(f"in the transparency log at leaf {index} of {size}" +
                        (", checkpoint signed by a log key the org certified" if org_key is not None else
                         " (checkpoint signature not checked)") + "; the log's chain head is the spans'")
    return tuple(indexes)


def _check_verdicts(case: Case, org_key: Ed25519PublicKey | None, found: _Findings) -> None:
    """Each verdict the collector signed must verify; an unsigned one is said to be ignored."""
    _, weighed = weigh(case.run_id, case.spans, case.classifications, org_key)
    forged = next((w for w in weighed if w.forged), None)
    if forged is not None:
        found.problems.append(f"stored verdict {forged.index} ({forged.judge}) is refused: {forged.why}")
        return
    signed = [w for w in weighed if w.signed]
    if signed and org_key is not None:
        found.proven.append(f"{len(signed)} verdict(s) signed by the collector with the log key the org certified")
    elif signed:
        found.notes.append(f"{len(signed)} verdict(s) signed by the collector: signatures not checked (no org key)")
    for w in weighed:
        if not w.signed:
            found.notes.append(f"stored verdict {w.index} ({w.judge}: {w.outcome}) is unsigned: not evidence, "
                               "ignored (what is made from the case uses the detectors run again and signed "
                               "verdicts)")


# --- a case as a read-only store ------------------------------------------------------------------------
class CaseReader:
    """A case as a read-only :class:`RunSource`: one run, its spans, and its agents' keys as the
    case's certificates name them, so replay, fork and analyze need no store and no collector. It keeps
    nothing beside the run (no verdicts, expected outcomes or trials are stored in it, no log is read
    from it): its keepers are None."""

    def __init__(self, case: Case, *, path: Path | None = None) -> None:
        self.case = case
        self.path = path

    def list_runs(
        self,
        *,
        agent: str | None = None,
        status: str | None = None,
        since_ns: int | None = None,
        until_ns: int | None = None,
        limit: int = 100,
        after: tuple[int, str] | None = None,
        verdict: str | None = None,
    ) -> list[RunSummary]:
        run = self.case.summary
        keep = (
            (agent is None or agent == run.agent_id)
            and (status is None or status in (run.chain.status.value, run.status_code))
            and (since_ns is None or run.start_ns >= since_ns)
            and (until_ns is None or run.start_ns < until_ns)
            and (after is None or (run.start_ns, run.run_id) < after)
            and (not verdict or verdict_matches(self.case.classifications, verdict))
            and limit > 0
        )
        return [run] if keep else []

    def get_run(self, run_id: str) -> RunSummary | None:
        return self.case.summary if run_id == self.case.run_id else None

    def get_run_spans(self, run_id: str) -> list[SpanRecord]:
        return list(self.case.spans) if run_id == self.case.run_id else []

    def get_chain_status(self, run_id: str) -> ChainStatus | None:
        return self.case.summary.chain if run_id == self.case.run_id else None

    def list_traces(self, *, prefix: str = "", since_ns: int | None = None, until_ns: int | None = None,
                    limit: int = 100) -> list[TraceSummary]:
        return []

    def get_agent_key(self, kid: str) -> Ed25519PublicKey | None:
        """None: a case vouches for no key by itself. Its seals count against the org key and the
        case's certificates (:func:`check`, or ``verify`` with ``certificates``)."""
        return None

    def get_agent_certificate(self, kid: str) -> str | None:
        return self.case.certificates.get(kid)

    def decisions(self, run_id: str) -> list[DecisionRecord]:
        return list(self.case.decisions) if run_id == self.case.run_id else []

    def manifest(self, sha256: str) -> str | None:
        return self.case.manifest if sha256 and sha256 == self.case.manifest_sha256 else None

    def classifications(self, run_id: str) -> list[StoredClassification]:
        """Newest first, as the store answers."""
        return list(reversed(self.case.classifications)) if run_id == self.case.run_id else []

    def verdicts(self, admin_token: str | None = None) -> None:
        return None

    def expected(self, admin_token: str | None = None) -> None:
        return None

    def trials(self, admin_token: str | None = None) -> None:
        return None

    def records(self) -> None:
        return None

    def log(self) -> None:
        return None

    def trust_score(self, agent_id: str) -> None:
        return None

    def receives_runs(self) -> bool:
        """False: what is recorded now never comes into a file."""
        return False

    def close(self) -> None:
        """Nothing to release."""

    def __enter__(self) -> CaseReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = [
    "CASE_FORMAT",
    "Case",
    "CaseCheck",
    "CaseError",
    "CaseReader",
    "check",
    "collect",
    "read",
    "write",
]
