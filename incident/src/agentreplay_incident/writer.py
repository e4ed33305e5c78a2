"""An incident: everything one failed run becomes, written to one folder by one call.

From a :class:`~agentreplay_incident.case.Case` checked against the org key: the root cause (the
analysis verdict), the regression test and its case (:mod:`~agentreplay_incident.testgen`), the
dispute and insurance-claim packets (:mod:`~agentreplay_incident.packets`, JSON and HTML) and the
narrated walkthrough (:mod:`~agentreplay_incident.walkthrough`). ``agentreplay incident`` calls
:func:`write_incident`; so does the collector's analysis worker for halted runs (:func:`for_halted_run`).

The folder::

    root-cause.json      the verdict (MAST modes, culprit step, evidence, the fork that should fix it):
                         the detectors run again on the checked spans, plus what an LLM judge's verdict
                         the collector signed adds (:mod:`~agentreplay_analysis.evidence`); its
                         notes name each stored verdict ignored (unsigned) and why
    tests/               test_<agent>_<run>.py and its case file (<agent>-<run>.case.json)
    dispute.json .html   for the counterparty
    claim.json .html     for the insurer ("nothing to claim" when the run did not fail)
    walkthrough.html     one self-contained page, opened on the culprit step

A run recorded without keys (no seal) gets its incident too: the first line of every file says it is
UNSIGNED and not evidence (:data:`~agentreplay_incident.case.UNSIGNED_NOTICE`).
"""

from __future__ import annotations

import os
import re
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentreplay_analysis import Verdict
from agentreplay_client.incidents import INCOMING, remove_folder
from agentreplay_client.models import TrustScore
from agentreplay_client.reader import RunSource
from agentreplay_incident import case as casefile
from agentreplay_incident import packets, testgen, walkthrough
from agentreplay_otel.core import IdentityError, load_public_key

TESTS_DIR = "tests"
ROOT_CAUSE = "root-cause.json"
DISPUTE = "dispute"
CLAIM = "claim"
WALKTHROUGH = "walkthrough.html"
ORG_KEY_NAME = "ORG.pub"
"""How the packets' verify command names the org public key (the reader has their own copy)."""
PROOF_WAIT_S = 30.0
"""How long the collector's incident writer waits for a signed checkpoint to cover a halted run."""


class IncidentError(Exception):
    """No incident could be written: a case that does not check, a run with nothing recorded."""


@dataclass(frozen=True, kw_only=True)
class Written:
    """One file of the incident, and what it is for."""

    path: Path
    what: str


@dataclass(frozen=True, kw_only=True)
class Incident:
    run_id: str
    verdict: Verdict
    files: tuple[Written, ...]
    claim: dict[str, Any]  # the claim packet's "claim": nothing_to_claim, reason, amounts by currency
    signed: bool = True  # False: a run recorded without keys; every file says UNSIGNED first
    checks: tuple[testgen.Check, ...]  # the generated test's functions

    @property
    def test(self) -> Path:
        return next(w.path for w in self.files if w.path.suffix == ".py")

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "signed": self.signed, "verdict": self.verdict.to_json(), "claim": self.claim,
                "files": [{"path": str(w.path), "what": w.what} for w in self.files],
                "checks": [{"name": c.name, "mode": c.mode} for c in self.checks]}


def write_incident(case: casefile.Case, out_dir: Path, org_key: Ed25519PublicKey | None, *,
                   trust: TrustScore | None = None) -> Incident:
    """Check ``case`` (a signed run against the org key, an unsigned one for its chain's links), then
    write every part of its incident into ``out_dir``."""
    try:
        generated = testgen.generate(case, out_dir / TESTS_DIR, org_key)  # checks the case first
    except testgen.TestgenError as exc:
        raise IncidentError(str(exc)) from exc
    verdict = testgen.verdict_of(case, org_key)  # the detectors again, and judges' verdicts only if signed
    case_ref = str(generated.case.relative_to(out_dir))
    files = [Written(path=generated.test, what="the regression test (pytest)"),
             Written(path=generated.case, what="its case: the run, checkable offline with the org key" if case.signed
                     else "its case: the run, UNSIGNED (only its chain's links can be checked)")]
    cause = verdict.to_json() if case.signed else {casefile.NOTICE: casefile.UNSIGNED_NOTICE, **verdict.to_json()}
    files.append(_json(out_dir / ROOT_CAUSE, cause, "the root cause: failure modes, culprit, evidence"))
    dispute = packets.dispute_packet(case, verdict, case_file=case_ref, org_key=ORG_KEY_NAME)
    claim = packets.insurance_packet(case, verdict, trust=trust, case_file=case_ref, org_key=ORG_KEY_NAME)
    for name, packet, what in ((DISPUTE, dispute, "the dispute packet, for the counterparty"),
                               (CLAIM, claim, "the insurance-claim packet")):
        files.append(_json(out_dir / f"{name}.json", packet, what))
        files.append(_text(out_dir / f"{name}.html", packets.render_html(packet), f"{what}, rendered"))
    files.append(_text(out_dir / WALKTHROUGH, walkthrough.walkthrough_html(case, verdict),
                       "the narrated walkthrough (open it in a browser; arrow keys step)"))
    return Incident(run_id=case.run_id, verdict=verdict, files=tuple(files), claim=dict(claim["claim"]),
                    checks=generated.checks, signed=case.signed)


def _json(path: Path, doc: Any, what: str) -> Written:
    return _text(path, casefile.json_text(doc, indent=2) + "\n", what)


def _text(path: Path, text: str, what: str) -> Written:
    path.write_text(text, encoding="utf-8")
    return Written(path=path, what=what)


def for_halted_run(source: RunSource, run_id: str, out_dir: Path, org_key_path: Path) -> Path:
    """The collector's hook (entry point ``agentreplay_incident:default``): the incident of a halted
    run, in ``out_dir/<run id>``; returns that folder.

    The incident is written into a folder of its own beside the others (named ``.incoming-…``) and
    renamed into place once whole, replacing the run's earlier incident: a writer killed mid-write
    leaves no half-written ``<run id>`` folder, only a dot-folder the collector sweeps at its next
    start. An :class:`OSError` is the folder refusing it (the collector retries); the other errors say
    the run's incident cannot be written."""
    if not _FOLDER_NAME.fullmatch(run_id):
        raise IncidentError(f"run id {run_id!r} cannot name a folder")
    try:
        key = load_public_key(org_key_path)
    except IdentityError as exc:
        raise IncidentError(f"the org public key {org_key_path}: {exc}") from exc
    case = logged_case(source, run_id, PROOF_WAIT_S)
    out_dir.mkdir(parents=True, exist_ok=True)
    incoming = out_dir / f"{INCOMING}{run_id}-{uuid.uuid4().hex[:12]}"
    incoming.mkdir()
    try:
        write_incident(case, incoming, key)
        target = out_dir / run_id
        remove_folder(target)  # the run's earlier incident, if any
        os.replace(incoming, target)
    except BaseException:
        shutil.rmtree(incoming, ignore_errors=True)
        raise
    return target


_FOLDER_NAME = re.compile(r"[0-9A-Za-z][0-9A-Za-z_-]{0,127}")
"""A run id that can name the incident's folder as it is (the collector's run ids are hex)."""


def logged_case(source: RunSource, run_id: str, wait_s: float) -> casefile.Case:
    """The run's case once a signed checkpoint covers it, or after ``wait_s``. The collector logs a run
    when it judges it and signs a checkpoint every ``checkpoint_interval``: a case collected in between
    carries the log key's certificate and no proof, and ``verify`` requires the proof of such a case."""
    case = casefile.collect(source, run_id)
    deadline = time.monotonic() + wait_s
    while case.log_certificate is not None and not case.inclusion and time.monotonic() < deadline:
        time.sleep(0.5)
        case = casefile.collect(source, run_id)
    return case
