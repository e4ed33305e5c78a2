"""The transparency log: ``log checkpoint``, ``log prove``, ``log consistency``, ``log audit``, ``log certify``.

Every answer is checked here, with the org public key the user brings: a checkpoint counts only if
a log key the org certified signed it, a run is in the log only if its inclusion proof leads to a
checkpoint's root, and today's log extends a saved head only if the consistency proof says so.
What the collector (or the store) serves is never taken on its word. See docs/transparency.md.
Longer than the other command groups: five commands, each verifying its proofs here and
explaining a failure by position, which is what an auditor reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentreplay_client.errors import StoreError
from agentreplay_client.models import LogEntry
from agentreplay_client.reader import LogReader, RunReader
from agentreplay_otel import core
from agentreplay_otel.core import (
    Checkpoint,
    CheckpointError,
    InclusionProof,
    SignedCheckpoint,
    chain_head,
    decode_leaf,
    merkle,
    semconv,
)
from agentreplay_replay.cli._client import org_public_key, reader, resolve_run
from agentreplay_replay.cli._common import (
    CLIError,
    CollectorOpt,
    JsonOpt,
    RunArg,
    StoreOpt,
    err,
    out,
    print_json,
)
from agentreplay_replay.cli._identity import DEFAULT_KEYS, KeysDirOpt, OrgKeyOpt, _org_key, _write_owner_only

PANEL = "Transparency log"
PAGE = 10_000  # leaves a request, as the read API serves them
log_app = typer.Typer(
    help="The transparency log: every judged run a leaf of a Merkle tree the collector signs "
    "checkpoints of. Proofs are checked here, with the org public key.",
    no_args_is_help=True,
)
app = typer.Typer()
app.add_typer(log_app, name="log", rich_help_panel=PANEL)

OrgPublicOpt = Annotated[
    Path | None,
    typer.Option(
        "--org-key",
        help=f"The org public key (PEM; default: ${semconv.ENV_ORG_PUBLIC_KEY}): a checkpoint counts only if a "
             "log key it certified signed it.",
    ),
]


@contextmanager
def _open(store: str | None, collector: str | None) -> Iterator[tuple[LogReader, RunReader]]:
    """The log and the runs: through the collector when one answers, else from the store itself."""
    with reader(store, collector) as runs:
        log = runs.log()
        if log is None:
            raise CLIError("this reader keeps no transparency log")
        yield log, runs


def _org(path: Path | None) -> Ed25519PublicKey:
    key = org_public_key(path)
    if key is None:
        raise CLIError(f"the org public key is needed (--org-key or ${semconv.ENV_ORG_PUBLIC_KEY}): a checkpoint "
                       "is only worth the key that certified its signer")
    return key


def _load_head(path: Path) -> SignedCheckpoint:
    try:
        return SignedCheckpoint.from_json(json.loads(path.read_text()))
    except (OSError, ValueError) as exc:
        raise CLIError(f"cannot read the saved checkpoint {path}: {exc}") from exc
    except CheckpointError as exc:
        raise CLIError(f"{path}: {exc}") from exc


MAX_TILES = 1024


def tile_ranges(size: int) -> list[merkle.Range]:
    """The tree of ``size`` leaves cut into at most about :data:`MAX_TILES` perfect subtrees of equal
    width (and the smaller ones its right edge ends with): single leaves up to that size."""
    width_level = max(0, (-(-size // MAX_TILES) - 1).bit_length())
    ranges: list[merkle.Range] = []
    for node in merkle.Frontier.nodes(size):
        step = 1 << min(node.level, width_level)
        ranges += [(s, s + step) for s in range(node.start, node.end, step)]
    return ranges


def root_of_tiles(size: int, tiles: Sequence[bytes]) -> bytes:
    """The root the tiles of :func:`tile_ranges` make."""
    ranges, at, parts = tile_ranges(size), 0, []
    for node in merkle.Frontier.nodes(size):
        level = [h for (s, _), h in zip(ranges[at:], tiles[at:], strict=False) if s < node.end]
        at += len(level)
        while len(level) > 1:  # a perfect subtree: pair up
            level = [merkle.node_hash(level[i], level[i + 1]) for i in range(0, len(level), 2)]
        parts += level
    return merkle.fold(parts) if parts else merkle.EMPTY_ROOT


def _tiles(log: LogReader, cp: Checkpoint) -> list[dict[str, Any]]:
    """The checkpoint's tree as tiles, checked against its root: saved with a head, they let ``audit``
    name the first leaves that changed when the log stops extending it (one leaf, up to 1024 leaves)."""
    ranges = tile_ranges(cp.size)
    hashes = log.subtrees(ranges)
    if root_of_tiles(cp.size, hashes) != cp.root:
        raise StoreError("the log's subtree hashes do not lead to the checkpoint's root")
    return [{"start": s, "end": e, "hash": h.hex()} for (s, e), h in zip(ranges, hashes, strict=True)]


def _head_json(signed: SignedCheckpoint, log: LogReader) -> dict[str, Any]:
    doc = signed.to_json()
    try:
        doc["tiles"] = _tiles(log, signed.checkpoint)
    except StoreError as exc:
        err.print(f"the checkpoint is saved without its subtree hashes: {exc}", soft_wrap=True)
    return doc


def _describe(cp: Checkpoint) -> str:
    return f"{cp.size} leaves, root {cp.root.hex()[:16]}…, signed {_time(cp.time_ns)} by log key {cp.kid}"


def _time(ns: int) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(ns / 1e9, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


# --- log checkpoint ---------------------------------------------------------------------------------
@log_app.command("checkpoint")
def checkpoint(
    size: Annotated[int | None, typer.Option(min=0, help="A stored checkpoint of this many leaves.")] = None,
    org_key: OrgPublicOpt = None,
    json_: JsonOpt = False,
    store: StoreOpt = None,
    collector: CollectorOpt = None,
) -> None:
    """The latest signed checkpoint, verified with the org key.

    Save its JSON: `log audit --since` later proves the log still extends it (nothing deleted,
    changed or rolled back since).

    \b
    Examples:
      agentreplay log checkpoint --org-key org.pub
      agentreplay log checkpoint --json > head-2025-06-01.json
    """
    org = _org(org_key)
    with _open(store, collector) as (log, _):
        signed = log.checkpoint(size)
        if signed is None:
            raise CLIError("no signed checkpoint" + (f" of {size} leaves" if size is not None else "") +
                           ": is a log key configured (extensions.agentreplay_transparency)?")
        try:
            cp = signed.verify(org)
        except CheckpointError as exc:
            err.print(f"[bold red]REFUSED[/] {exc}", soft_wrap=True)
            raise typer.Exit(1) from exc
        if json_:
            print_json(_head_json(signed, log))
            return
    out.print(f"[green]verified[/] checkpoint: {_describe(cp)}, certified by org key {core.key_id(org)}",
              soft_wrap=True)
    out.print(f"root {cp.root.hex()}")


# --- log prove -------------------------------------------------------------------------------------
@log_app.command("prove")
def prove(
    run_id: RunArg,
    head: Annotated[Path | None, typer.Option(
        "--checkpoint", help="Prove against this saved checkpoint (default: the latest).")] = None,
    org_key: OrgPublicOpt = None,
    json_: JsonOpt = False,
    store: StoreOpt = None,
    collector: CollectorOpt = None,
) -> None:
    """Prove a run is in the log, and stored as it was logged.

    Checks its leaf, the leaf's inclusion proof to a signed checkpoint, and that the run as stored
    now still ends where its leaf says.

    Exit 0 when every check passes, 1 when one fails (not in the log, a proof that does not lead
    to the checkpoint's root, a stored run that no longer matches its leaf). With --json, each
    leaf's "inclusion" (the leaf, its proof, the signed checkpoint) is checkable offline with the
    org public key alone (agentreplay_otel.core.InclusionProof).

    \b
    Examples:
      agentreplay log prove 3f2a9c --org-key org.pub
      agentreplay log prove 3f2a9c --checkpoint head-2025-06-01.json --json
    """
    org = _org(org_key)
    with _open(store, collector) as (log, runs):
        full = resolve_run(runs, run_id)
        signed = _load_head(head) if head is not None else log.checkpoint()
        if signed is None:
            raise CLIError("no signed checkpoint yet: is a log key configured (extensions.agentreplay_transparency)?")
        try:
            cp = signed.verify(org)
        except CheckpointError as exc:
            _answer(json_, {"run_id": full, "ok": False, "problem": f"checkpoint refused: {exc}"})
            return
        proven = log.run_proofs(full, cp.size)
        spans = runs.get_run_spans(full)
    result = _prove(full, signed, cp, proven, chain_head(spans) if spans else None, org)
    if not json_:
        out.print(f"checkpoint: {_describe(cp)} (certified by org key {core.key_id(org)})", soft_wrap=True)
    _answer(json_, result)


def _prove(
    run_id: str,
    signed: SignedCheckpoint,
    cp: Checkpoint,
    proven: list[tuple[LogEntry, list[bytes]]],
    head: core.ChainHead | None,
    org: Ed25519PublicKey,
) -> dict[str, Any]:
    if not proven:
        return {"run_id": run_id, "ok": False, "problem": f"not among the {cp.size} leaves of the checkpoint "
                "(not judged yet, judged after it, or its leaf was removed)"}
    leaves = []
    for entry, proof in proven:
        carried = InclusionProof(checkpoint=signed, index=entry.index, leaf=entry.leaf, proof=tuple(proof))
        try:
            leaf = carried.verify(org)
            if leaf.run_id != run_id:
                raise merkle.ProofError(f"it is run {leaf.run_id}'s")
        except (merkle.ProofError, CheckpointError) as exc:
            return {"run_id": run_id, "ok": False, "problem": f"leaf {entry.index}: {exc}"}
        leaves.append({"index": entry.index, "verdict": leaf.verdict, "seq": leaf.head.seq, "head": leaf.head.hash,
                       "sealed": bool(leaf.head.seal), "received_ns": str(leaf.received_ns),
                       "logged_ns": str(entry.logged_ns), "inclusion": carried.to_json()})
    latest = decode_leaf(proven[-1][0].leaf)
    doc: dict[str, Any] = {"run_id": run_id, "size": cp.size, "root": cp.root.hex(), "leaves": leaves}
    if head is None:
        return {**doc, "ok": False, "problem": "the run's spans are no longer in the store (deleted after it was logged)"}
    if head != latest.head:
        return {**doc, "ok": False, "problem": f"the stored run ends at seq {head.seq} (hash {head.hash[:16]}…), the "
                f"log recorded seq {latest.head.seq} (hash {latest.head.hash[:16]}…): it was changed after it was logged"}
    return {**doc, "ok": True}


def _answer(json_: bool, result: dict[str, Any]) -> None:
    if json_:
        print_json(result)
    elif result["ok"]:
        for leaf in result["leaves"]:
            out.print(f"[green]included[/] run {result['run_id']} at leaf {leaf['index']} of {result['size']}: "
                      f"verdict {leaf['verdict']}, chain head seq {leaf['seq']}, received {_time(int(leaf['received_ns']))}",
                      soft_wrap=True)
        out.print("the run as stored ends where the log says", soft_wrap=True)
    else:
        out.print(f"[bold red]FAILED[/] run {result['run_id']}: {result['problem']}", soft_wrap=True)
    if not result["ok"]:
        raise typer.Exit(1)


# --- log consistency ----------------------------------------------------------------------------------
@log_app.command("consistency")
def consistency(
    old: Annotated[str, typer.Argument(help="A tree size with a stored checkpoint, or a saved checkpoint file.")],
    new: Annotated[str, typer.Argument(help="A later tree size or checkpoint file.")],
    org_key: OrgPublicOpt = None,
    json_: JsonOpt = False,
    store: StoreOpt = None,
    collector: CollectorOpt = None,
) -> None:
    """Prove the log at NEW extends the log at OLD: every leaf of OLD is in NEW, unchanged, in place.

    \b
    Examples:
      agentreplay log consistency 120 180 --org-key org.pub
      agentreplay log consistency head-2025-06-01.json head-2025-07-01.json
    """
    org = _org(org_key)
    with _open(store, collector) as (log, _):
        heads = [_head_arg(log, arg) for arg in (old, new)]
        try:
            a, b = (h.verify(org) for h in heads)
        except CheckpointError as exc:
            _consistency_answer(json_, {"ok": False, "problem": f"checkpoint refused: {exc}"})
            return
        doc: dict[str, Any] = {"old": {"size": a.size, "root": a.root.hex()}, "new": {"size": b.size, "root": b.root.hex()}}
        if b.size < a.size:
            _consistency_answer(json_, {**doc, "ok": False, "problem": f"NEW has {b.size} leaves, OLD {a.size}"})
            return
        try:
            proof = log.consistency(a.size, b.size)
            merkle.verify_consistency(a.size, b.size, a.root, b.root, proof)
        except (StoreError, merkle.ProofError) as exc:
            _consistency_answer(json_, {**doc, "ok": False, "problem": str(exc)})
            return
    _consistency_answer(json_, {**doc, "ok": True, "proof": [p.hex() for p in proof]})


def _head_arg(log: LogReader, arg: str) -> SignedCheckpoint:
    if arg.isdigit():
        found = log.checkpoint(int(arg))
        if found is None:
            raise CLIError(f"no stored checkpoint of {arg} leaves (`agentreplay log checkpoint --json` saves heads)")
        return found
    return _load_head(Path(arg))


def _consistency_answer(json_: bool, result: dict[str, Any]) -> None:
    if json_:
        print_json(result)
    elif result["ok"]:
        out.print(f"[green]consistent[/] the log of {result['new']['size']} leaves extends the log of "
                  f"{result['old']['size']}", soft_wrap=True)
    else:
        out.print(f"[bold red]INCONSISTENT[/] {result['problem']}", soft_wrap=True)
    if not result["ok"]:
        raise typer.Exit(1)


# --- log audit -------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Finding:
    """Something wrong with the log, and the first position it concerns."""

    kind: str  # refused, rolled_back, rewritten, missing, altered, damaged
    position: int | None
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "position": self.position, "detail": self.detail}


@log_app.command("audit")
def audit(
    since: Annotated[Path, typer.Option("--since", help="A checkpoint saved earlier (`log checkpoint --json`).")],
    quick: Annotated[bool, typer.Option(
        "--quick", help="Check the heads only (signatures and the consistency proof), not every leaf.")] = False,
    update: Annotated[bool, typer.Option(
        "--update", help="When the audit passes, save the current checkpoint to the --since file.")] = False,
    org_key: OrgPublicOpt = None,
    json_: JsonOpt = False,
    store: StoreOpt = None,
    collector: CollectorOpt = None,
) -> None:
    """Verify the log still extends a head saved earlier; name the first inconsistent position.

    A rollback, a deleted or changed leaf, or a rewritten history is found.

    Checks: both checkpoints are signed by org-certified log keys; the log did not shrink; the
    consistency proof from the saved head to the current one; and (unless --quick) every stored
    leaf, recomputed into the current root, so a leaf deleted or edited in the store is named.

    \b
    Examples:
      agentreplay log checkpoint --json > head.json      # keep it somewhere the store's writers cannot reach
      agentreplay log audit --since head.json --org-key org.pub
      agentreplay log audit --since head.json --quick --update
    """
    org = _org(org_key)
    saved = _load_head(since)
    with _open(store, collector) as (log, _):
        current = log.checkpoint()
        if current is None:
            raise CLIError("no signed checkpoint: is a log key configured (extensions.agentreplay_transparency)?")
        findings, checked = _audit(log, saved, current, org, since_doc=json.loads(since.read_text()), quick=quick)
        if not findings and update:
            since.write_text(json.dumps(_head_json(current, log), indent=2) + "\n")
    ok = not findings
    doc = {
        "ok": ok,
        "saved": {"size": saved.checkpoint.size, "root": saved.checkpoint.root.hex()},
        "current": {"size": current.checkpoint.size, "root": current.checkpoint.root.hex(),
                    "time_ns": str(current.checkpoint.time_ns)},
        "leaves_checked": checked,
        "first_inconsistent_position": next((f.position for f in findings if f.position is not None), None),
        "findings": [f.to_json() for f in findings],
    }
    if json_:
        print_json(doc)
    elif ok:
        out.print(f"[green]consistent[/] the log ({_describe(current.checkpoint)}) extends the saved head of "
                  f"{saved.checkpoint.size} leaves" + ("" if quick else f"; {checked} stored leaves checked"),
                  soft_wrap=True)
    else:
        for f in findings:
            where = f" at position {f.position}" if f.position is not None else ""
            out.print(f"[bold red]{f.kind.upper()}[/]{where}: {f.detail}", soft_wrap=True)
    if not ok:
        raise typer.Exit(1)


def _audit(
    log: LogReader, saved: SignedCheckpoint, current: SignedCheckpoint, org: Ed25519PublicKey, *,
    since_doc: dict[str, Any], quick: bool,
) -> tuple[list[Finding], int]:
    try:
        old = saved.verify(org)
    except CheckpointError as exc:
        return [Finding(kind="refused", position=None, detail=f"the saved checkpoint: {exc}")], 0
    try:
        new = current.verify(org)
    except CheckpointError as exc:
        return [Finding(kind="refused", position=None, detail=f"the current checkpoint: {exc}")], 0
    tiles = _saved_tiles(old, since_doc.get("tiles"))
    if new.size < old.size:
        changed = _first_changed_tile(log, [t for t in tiles if t[1] <= new.size])
        if changed is not None:
            return [changed], 0
        return [Finding(kind="rolled_back", position=new.size,
                        detail=f"the log has {new.size} leaves, the saved head {old.size}: "
                        f"leaves {new.size}..{old.size - 1} are gone")], 0
    try:
        merkle.verify_consistency(old.size, new.size, old.root, new.root, log.consistency(old.size, new.size))
    except (merkle.ProofError, StoreError) as exc:
        changed = _first_changed_tile(log, tiles)
        return [changed or Finding(kind="rewritten", position=None,
                                   detail=f"the log no longer extends the saved head of {old.size} leaves ({exc})")], 0
    if quick:
        return [], 0
    return _scan(log, new)


def _first_changed_tile(log: LogReader, tiles: list[tuple[int, int, bytes]]) -> Finding | None:
    """The first of the saved head's tiles whose leaves the log no longer holds as the head committed
    to them (the tiles are authentic: they make the signed root; the log's answer is only compared)."""
    if not tiles:
        return None
    try:
        now: list[bytes] = log.subtrees([(s, e) for s, e, _ in tiles])
    except StoreError:  # e.g. the log no longer holds that many leaves: compare what it does hold
        now = []
        for s, e, _ in tiles:
            try:
                now += log.subtrees([(s, e)])
            except StoreError:
                now.append(b"")
    for (start, end, digest), current in zip(tiles, now, strict=True):
        if current != digest:
            where = f"leaf {start}" if end - start == 1 else f"leaves {start}..{end - 1}"
            return Finding(kind="rewritten", position=start,
                           detail=f"{where} of the saved head are no longer in the log as it committed to them: "
                           "the log was rewritten or rolled back")
    return None


def _saved_tiles(old: Checkpoint, tiles: Any) -> list[tuple[int, int, bytes]]:
    """The saved head's tiles, if they are the ones its signed root is made of (else none)."""
    try:
        saved = [(int(t["start"]), int(t["end"]), bytes.fromhex(t["hash"])) for t in tiles or ()]
    except (TypeError, KeyError, ValueError):
        return []
    if [(s, e) for s, e, _ in saved] != tile_ranges(old.size) or not saved:
        return []
    if root_of_tiles(old.size, [h for _, _, h in saved]) != old.root:
        return []
    return saved


_ABSENT = b"\x00" * merkle.HASH_SIZE


def _scan(log: LogReader, cp: Checkpoint) -> tuple[list[Finding], int]:
    """Recompute the current root from every stored leaf; on a mismatch, find the first leaf that is
    not the one the checkpoint committed to (descending the tree, each step checked against its parent)."""
    hashes = bytearray()
    frontier = merkle.Frontier()
    findings: list[Finding] = []
    for start in range(0, cp.size, PAGE):
        end = min(cp.size, start + PAGE)
        try:
            entries = {e.index: e for e in log.entries(start, end)}
        except StoreError as exc:
            return [Finding(kind="damaged", position=start, detail=f"the leaves from {start} cannot be read: {exc}")], start
        for i in range(start, end):
            entry = entries.get(i)
            digest = merkle.leaf_hash(entry.leaf) if entry is not None else _ABSENT
            if entry is None and not findings:
                findings.append(Finding(kind="missing", position=i, detail=f"no leaf is stored at position {i}: "
                                        "it was deleted from the store"))
            hashes += digest
            frontier.append(digest)
    if frontier.root() == cp.root:
        return [], cp.size
    first = _first_bad_leaf(log, hashes, cp)
    if isinstance(first, Finding):
        return findings or [first], cp.size
    if findings and findings[0].position == first:
        return findings, cp.size
    entry_note = ""
    try:
        found = log.entries(first, first + 1)
        entry_note = f" (stored: run {decode_leaf(found[0].leaf).run_id})" if found else ""
    except (StoreError, ValueError):
        pass
    return [Finding(kind="altered", position=first,
                    detail=f"the leaf stored at position {first}{entry_note} is not the one the checkpoint "
                    "committed to: it was changed or replaced in the store")], cp.size


def _first_bad_leaf(log: LogReader, hashes: bytearray, cp: Checkpoint) -> int | Finding:
    def local(start: int, end: int) -> bytes:
        return merkle.root_hash([bytes(hashes[i * 32:(i + 1) * 32]) for i in range(start, end)])

    start, end, want = 0, cp.size, cp.root
    while end - start > 1:
        k = merkle.split_point(end - start)
        try:
            left, right = log.subtrees([(start, start + k), (start + k, end)])
        except StoreError as exc:
            return Finding(kind="damaged", position=start, detail=f"the log's tree hashes of leaves {start}..{end - 1} "
                           f"cannot be read ({exc}), and its stored leaves do not lead to the signed root")
        if merkle.node_hash(left, right) != want:
            return Finding(kind="damaged", position=start, detail=f"the log's tree hashes of leaves {start}..{end - 1} "
                           "no longer lead to the signed root, nor do its stored leaves")
        if local(start, start + k) != left:
            end, want = start + k, left
        else:
            start, want = start + k, right
    return start


# --- log certify ----------------------------------------------------------------------------------
@log_app.command("certify")
def certify(
    out_dir: Annotated[Path | None, typer.Option("--out", help="(default: KEYS/log)")] = None,
    keys: KeysDirOpt = DEFAULT_KEYS,
    org_key: OrgKeyOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Create the collector's log key (log.key, 0600) and the org's certificate of it (log.cert.json).

    \b
    Examples:
      agentreplay log certify
      agentreplay log certify --keys /secure/org-keys --out /etc/agentreplay/log
    """
    org = _org_key(keys, org_key)
    target = out_dir or keys / "log"
    key = core.generate_key()
    core.write_private_key(key, target / "log.key")
    _write_owner_only(target / "log.cert.json", json.dumps(core.certify_log_key(org, key.public_key()), indent=2) + "\n")
    config = {"signing_key": str(target / "log.key"), "certificate": str(target / "log.cert.json")}
    if json_:
        print_json({"kid": core.key_id(key), "org_kid": core.key_id(org), **config})
        return
    out.print(f"log key {core.key_id(key)}, certified by org key {core.key_id(org)}")
    out.print("collector config:\nextensions:\n  agentreplay_transparency:")
    for name, value in config.items():
        out.print(f"    {name}: {value}")
