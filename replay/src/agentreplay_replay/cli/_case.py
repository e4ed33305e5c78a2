"""Case files: ``export`` (a run to one file), and ``verify FILE`` (checked offline, the org key alone).

``verify`` is :mod:`._read`'s command; given an existing file it checks a case here instead of a
stored run. ``replay``, ``fork`` and ``analyze`` take a case file where they take a run id
(:func:`._client.open_run`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentreplay_client.models import ChainState
from agentreplay_client.reader import RunReader, RunSource
from agentreplay_otel.core import InclusionProof, semconv
from agentreplay_replay.cli._client import case_of, reader, resolve_run
from agentreplay_replay.cli._common import (
    CLIError,
    CollectorOpt,
    JsonOpt,
    RunArg,
    StoreOpt,
    err,
    lazy_module,
    out,
    print_json,
)

if TYPE_CHECKING:
    from agentreplay_incident import case as cases
    from agentreplay_replay import replayer
else:
    cases = lazy_module("agentreplay_incident.case")
    replayer = lazy_module("agentreplay_replay.replayer")

PANEL = "Recorded runs"
app = typer.Typer()
WAIT_S = 60.0  # export's default wait for a run not yet judged and logged
_POLL_S = 0.25

RunOrCaseArg = Annotated[str, typer.Argument(
    help="Run id or unique prefix (`agentreplay runs` lists them), or a case file (`agentreplay export`).")]
RecordedCommandOpt = Annotated[bool, typer.Option(
    "--recorded-command", help="A case file with no command after --: run the command the case recorded "
    "(printed first), only once the case verifies against the org key. A run of your own store runs its "
    "recorded command without it.")]
CaseOrgKeyOpt = Annotated[Path | None, typer.Option(
    "--org-key", dir_okay=False,
    help=f"The org public key (PEM) a case file, or a replayed run's seal, is checked against (default: "
         f"${semconv.ENV_ORG_PUBLIC_KEY}).")]


def agent_command(source: RunReader, command: list[str] | None, recorded_command: bool,
                  org: Ed25519PublicKey | None) -> list[str]:
    """The agent's command for a replay: the one given after ``--``; else, for a run of the store,
    the recorded one (``[]``); for a case file, whose recorded command anyone who edits the file
    chooses, the recorded one only with ``--recorded-command`` and a case that verifies against the
    org key ``org``, printed before it runs."""
    if command or not isinstance(source, cases.CaseReader):
        return list(command or ())
    case = source.case
    recorded = replayer.recorded_command(case.recording)
    if not recorded_command:
        raise CLIError(f"a case file's recorded command runs only when asked ({recorded}): "
                       f"{replayer.AFTER_DASHES}, or --recorded-command with the org key to run it")
    if org is None:
        raise CLIError(f"--recorded-command runs a case's command only once the case verifies against the org "
                       f"key: give --org-key or ${semconv.ENV_ORG_PUBLIC_KEY} (recorded: {recorded})")
    found = cases.check(case, org)
    if not found.ok:
        raise CLIError(f"the case does not verify against the org key ({found.problems[0]}): its recorded "
                       f"command is not run ({recorded})")
    err.print(f"running the case's recorded command: {recorded}", soft_wrap=True)
    return []


@app.command(rich_help_panel=PANEL)
def export(
    run_id: RunArg,
    output: Annotated[Path, typer.Option("-o", "--output", help="The case file to write.", dir_okay=False)],
    json_: JsonOpt = False,
    store: StoreOpt = None,
    collector: CollectorOpt = None,
    no_wait: Annotated[bool, typer.Option(
        "--no-wait", help="Refuse a run the collector has not judged yet (or whose verdict is in no signed "
                          "checkpoint yet) rather than wait for it.")] = False,
    wait_s: Annotated[float, typer.Option(
        "--wait", min=0, help="Seconds to wait, at most, for a run not yet judged and logged.")] = WAIT_S,
) -> None:
    """Write a run to one file that anyone with the org public key can check offline.

    The case file holds the run's spans with their chain and seal, the org's certificates of its
    agent keys, the signed manifest it ran under, every policy decision, its stored verdicts, and
    its transparency-log inclusion proof with the signed checkpoint (when a log key is configured).

    Anyone with the org public key checks it offline (`agentreplay verify FILE --org-key ORG.pub`);
    replay, fork and analyze take the file where they take a run id, with no store and no collector.

    \b
    Examples:
      agentreplay export 3f2a9c -o incident-3f2a9c.case.json
      agentreplay verify incident-3f2a9c.case.json --org-key org.pub
      agentreplay replay incident-3f2a9c.case.json --org-key org.pub -- python agent.py
    """
    with reader(store, collector) as source:
        full = resolve_run(source, run_id)
        case = _ready_case(source, full, 0.0 if no_wait else wait_s)
    size = cases.write(case, output)
    summary = export_summary(case, output, size)
    for line in _short_of(case):
        err.print(f"warning: {output}: {line}", soft_wrap=True)
    if json_:
        print_json(summary)
        return
    proofs = summary["inclusion"]
    proof_text = (", ".join(f"leaf {p['index']} of {p['size']}" for p in proofs) if proofs
                  else "none (no log key configured, or the run is in no signed checkpoint yet)")
    out.print(f"wrote {output}: run {full}, {summary['spans']} span(s), {summary['decisions']} decision(s), "
              f"manifest {summary['manifest'][:16] + '…' if summary['manifest'] else 'none'}, "
              f"{summary['certificates']} agent certificate(s), "
              f"{summary['classifications']} verdict(s), log proof {proof_text}, {size} bytes", soft_wrap=True)


def _ready_case(source: RunSource, run_id: str, wait_s: float) -> cases.Case:
    """The run's case once the collector has judged the run and (with a log key) a signed checkpoint
    holds its verdict: right after a run its verdict is still pending (the quiet period, then the next
    checkpoint), and a case written then would lack what verifies it. Waits ``wait_s`` at most, then
    refuses, naming what is missing."""
    deadline = time.monotonic() + wait_s
    waited = False
    while True:
        summary = source.get_run(run_id)
        if summary is not None and summary.chain.status is ChainState.PENDING:
            why = ("the run is still being verified: the collector has not judged it yet (it does once no "
                   "span came for its quiet period)")
        else:
            case = case_of(source, run_id)
            verified_at_ns = case.summary.chain.verified_at_ns
            verdict_age_s = (time.time_ns() - verified_at_ns) / 1e9 if verified_at_ns else 0.0  # 0: not said
            logged = bool(cases.log_certificates(case))  # the collector keeps a log: the case needs its proof
            if case.inclusion or not logged or not (waited or verdict_age_s < WAIT_S):
                return case  # a run judged before the log (or long ago) has no leaf to wait for: said below
            why = "the run is still being verified: its verdict is in no signed checkpoint of the log yet"
        if time.monotonic() >= deadline:
            raise CLIError(f"run {run_id} cannot be exported yet: {why}; a case written now would not verify. "
                           f"Export again in a few seconds{' (or without --no-wait)' if wait_s == 0 else ''}")
        if not waited:
            err.print(f"waiting for run {run_id}: {why}", soft_wrap=True)
            waited = True
        time.sleep(_POLL_S)


def _short_of(case: cases.Case) -> list[str]:
    """What a written case lacks that a verifier with the org key will ask for."""
    lines = []
    kids = {s.attributes.get(semconv.IDENTITY_KID, "") for s in case.spans} - {""}
    if missing := sorted(kids - set(case.certificates)):
        lines.append(f"no certificate of agent key(s) {', '.join(missing)}: its seal will not verify")
    if cases.log_certificates(case) and not case.inclusion:
        lines.append("no transparency-log proof (the run is in no signed checkpoint): `verify` with the org key "
                     "refuses it unless --no-require-log-proof")
    return lines


def export_summary(case: cases.Case, path: Path, size: int) -> dict[str, Any]:
    """What a written case holds, in counts (``export``'s answer)."""
    proofs = [InclusionProof.from_json(p) for p in case.inclusion]
    return {
        "path": str(path),
        "run_id": case.run_id,
        "bytes": size,
        "spans": len(case.spans),
        "decisions": len(case.decisions),
        "certificates": len(case.certificates),
        "manifest": case.manifest_sha256 if case.manifest is not None else None,
        "classifications": len(case.classifications),
        "inclusion": [{"index": p.index, "size": p.checkpoint.checkpoint.size} for p in proofs],
    }


def verify_case(path: Path, org: Ed25519PublicKey | None, json_: bool, require_log_proof: bool | None = None) -> None:
    """``verify FILE``: the case checked offline; exit 1 when it does not verify. ``require_log_proof``:
    None requires the log proof when the case shows the org certified a log key."""
    try:
        case = cases.read(path)
    except cases.CaseError as exc:
        result: dict[str, Any] = {"path": str(path), "ok": False, "problems": [str(exc)], "proven": [], "notes": []}
        _answer(result, json_)
        return
    if org is None:
        err.print(f"no org key (--org-key or ${semconv.ENV_ORG_PUBLIC_KEY}): the case's consistency checked; "
                  "seals, certificates and signatures not checked", soft_wrap=True)
    found = cases.check(case, org, require_log_proof=require_log_proof)
    _answer({"path": str(path), **found.to_json()}, json_)


def _answer(result: dict[str, Any], json_: bool) -> None:
    if json_:
        print_json(result)
    elif result["ok"]:
        out.print(f"[green]verified[/] case {result['path']}: run {result['run_id']}", soft_wrap=True)
        for line in result["proven"]:
            out.print(f"  [green]✓[/] {line}", soft_wrap=True)
        for line in result["notes"]:
            out.print(f"  [yellow]![/] {line}", soft_wrap=True)
    else:
        out.print(f"[bold red]REFUSED[/] case {result['path']}: {result['problems'][0]}", soft_wrap=True)
    if not result["ok"]:
        raise typer.Exit(1)
