"""The incident writer's bookkeeping: what the store says of each halted run's incident folder, the
caps on what is kept (oldest removed first), and the folder's own housekeeping.

The writer itself (:mod:`agentreplay_incident.writer`, imported by the collector's analysis worker) builds
an incident in a folder whose name starts with :data:`INCOMING` and renames it into place, ``DIR/RUN``, so a
folder named after a run is always whole: a writer killed mid-write leaves only a dot-folder, which the next
start sweeps away. The store records each incident once it is in place (table ``incidents``,
:class:`StoredIncident`); a halted run with no record as new as its run row is due
(:meth:`~agentreplay_collector.store.verdicts.Verdicts.incidents_due`), so nothing is lost to a kill, a full
disk or a folder that refused it for a while: the next round, or the next start, writes it.

What is kept is capped per agent and in all (count and bytes, :class:`IncidentCaps`): past a cap the
oldest incidents are removed first (:func:`to_remove`), recorded as removed before their folder goes,
so a kill between the two leaves a folder the next start removes, never a record of a folder that
is not there.
"""

from __future__ import annotations

import enum
import os
import shutil
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

INCOMING = ".incoming-"
"""The prefix of an incident being written (renamed to the run's id once whole)."""
REMOVING = ".removing-"
"""The prefix of an incident folder being removed (renamed aside first, so it is gone at once)."""


class IncidentState(enum.StrEnum):
    WRITTEN = "written"  # the folder DIR/RUN is in place and counts against the caps
    REMOVED = "removed"  # removed by retention (oldest first, past a cap): not written again for this run row
    FAILED = "failed"  # the writer refused the run (its case does not check): not retried for this run row


@dataclass(frozen=True, kw_only=True)
class IncidentCaps:
    """What the writer keeps: per agent and in all, a count and bytes (``agentreplay_analysis.incidents``)."""

    max_per_agent: int = 100
    max_bytes_per_agent: int = 256 * 1024 * 1024
    max_total: int = 1000
    max_bytes_total: int = 2 * 1024 * 1024 * 1024


@dataclass(frozen=True, kw_only=True)
class IncidentDue:
    """A halted run whose incident is to be written: its run row's version (UpdatedAt) is what the
    record will say it was written for."""

    run_id: str
    agent_id: str
    run_updated_ns: int


@dataclass(frozen=True, kw_only=True)
class StoredIncident:
    """The latest record of a run's incident."""

    run_id: str
    agent_id: str
    run_updated_ns: int
    state: IncidentState
    bytes: int
    detail: str
    time_ns: int


def to_remove(kept: Sequence[StoredIncident], caps: IncidentCaps) -> list[StoredIncident]:
    """Which of the ``kept`` incidents to remove so that each agent's and the total count and bytes are
    within ``caps``: the oldest first (by when each was written), each agent's own first, then the
    total's. An incident larger than a byte cap on its own is removed too: a cap holds whatever an
    agent records."""
    ordered = sorted(kept, key=lambda i: (i.time_ns, i.run_id))
    gone: set[str] = set()
    for agent in dict.fromkeys(i.agent_id for i in ordered):
        _trim([i for i in ordered if i.agent_id == agent], caps.max_per_agent, caps.max_bytes_per_agent, gone)
    _trim(ordered, caps.max_total, caps.max_bytes_total, gone)
    return [i for i in ordered if i.run_id in gone]


def _trim(oldest_first: Sequence[StoredIncident], count: int, size: int, gone: set[str]) -> None:
    left = [i for i in oldest_first if i.run_id not in gone]
    number, total = len(left), sum(i.bytes for i in left)
    for incident in left:
        if number <= count and total <= size:
            return
        gone.add(incident.run_id)
        number, total = number - 1, total - incident.bytes


def folder_bytes(folder: Path) -> int:
    """The bytes of every file under ``folder`` (what the caps count)."""
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            try:
                total += (Path(root) / name).lstat().st_size
            except OSError:  # gone meanwhile: counts nothing
                continue
    return total


def remove_folder(folder: Path) -> None:
    """Rename ``folder`` aside (gone from its place at once), then delete it; nothing if it is not there."""
    if not folder.exists():
        return
    aside = folder.with_name(f"{REMOVING}{folder.name}-{uuid.uuid4().hex[:8]}")
    os.replace(folder, aside)
    shutil.rmtree(aside, ignore_errors=True)


def sweep(root: Path, removed: Iterable[str]) -> int:
    """At start: delete what a killed writer left (folders being written or removed) and the folders of
    incidents recorded as removed; how many folders went. A folder that is not there is fine."""
    if not root.is_dir():
        return 0
    gone = 0
    removed_ids = set(removed)
    for entry in root.iterdir():
        partial = entry.name.startswith((INCOMING, REMOVING))
        if entry.is_dir() and (partial or entry.name in removed_ids):
            shutil.rmtree(entry, ignore_errors=True)
            gone += 1
    return gone
