"""The collector's incident writer loses nothing and amplifies nothing (issue 25, item 5).

A real collector (auth, scope, the analysis worker with ``incidents``) over an embedded store, and an
agent under the launcher that halts its own runs at will (tests/incident/agents/halting_agent.py: a
search, then a day the manifest does not list). Killed (SIGKILL) in the middle of a burst of halted
runs, the collector writes each incident once it is started again, whole, and leaves no half-written
folder; a folder that refuses writes for a while gets every incident once it takes them again, with
no restart; a 256 KiB tool result is written once whole (the case) and clipped everywhere else; and
the caps keep the newest incidents, per agent and in all, the counts in ``/v1/stats``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentreplay_client.incidents import INCOMING, IncidentState
from agentreplay_collector.store import Store
from agentreplay_dev.collector import CollectorProcess, write_config
from agentreplay_dev.scenario import BIN, issue_identity
from agentreplay_incident.packets import VALUE_LIMIT
from agentreplay_otel.core import semconv

pytestmark = pytest.mark.e2e

AGENT = Path(__file__).parent / "agents" / "halting_agent.py"
WHOLE = ("root-cause.json", "dispute.json", "dispute.html", "claim.json", "claim.html", "walkthrough.html")
"""What a whole incident folder holds (besides tests/: the generated test and its case)."""


@dataclass
class World:
    root: Path
    config: Path
    incidents: Path
    creds: dict[str, str]
    caps: dict[str, Any]

    def start(self, where: CollectorProcess | None = None) -> CollectorProcess:
        """A collector on the config; on ``where``'s ports, so the agents' exporters find it again."""
        if where is not None:
            doc = yaml.safe_load(self.config.read_text())
            protocols = doc["receivers"]["otlp"]["protocols"]
            protocols["grpc"]["endpoint"] = where.endpoints["grpc"]
            protocols["http"]["endpoint"] = where.endpoints["http"]
            doc["extensions"]["agentreplay_control"]["endpoint"] = where.endpoints["control"]
            self.config.write_text(yaml.safe_dump(doc))
        return CollectorProcess(self.config, log=self.root / "collector.log").start()

    def write_incidents(self, on: bool) -> None:
        """Whether the analysis worker writes incidents (its verdicts are stored either way)."""
        doc = yaml.safe_load(self.config.read_text())
        analysis = doc["extensions"]["agentreplay_analysis"]
        if on:
            analysis["incidents"] = {"dir": str(self.incidents), **self.caps}
        else:
            analysis.pop("incidents", None)
        self.config.write_text(yaml.safe_dump(doc))

    def env(self, collector: CollectorProcess, agent_id: str) -> dict[str, str]:
        creds = self.creds if agent_id == "flight-booker" else issue_identity(
            self.root / agent_id, agent_id, org_key=self.root / "org.pem")  # the same org's
        return {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTREPLAY_"))} | creds | {
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{collector.grpc}", "OTEL_EXPORTER_OTLP_INSECURE": "true",
            "OTEL_SERVICE_NAME": agent_id, semconv.ENV_COLLECTOR: collector.control,
        }

    def agent(self, collector: CollectorProcess, runs: int, answer: str, *, agent_id: str = "flight-booker",
              wait: bool = True) -> subprocess.Popen[str]:
        answer_file = self.root / f"answer-{time.monotonic_ns()}.txt"
        answer_file.write_text(answer)
        proc = subprocess.Popen([str(BIN / "opentelemetry-instrument"), sys.executable, str(AGENT), str(runs),
                                 str(answer_file)], env=self.env(collector, agent_id), cwd=self.root,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if wait:
            out, err = proc.communicate(timeout=180)
            assert proc.returncode == 0, err[-3000:]
        return proc

    def log(self) -> str:
        path = self.root / "collector.log"
        return path.read_text()[-4000:] if path.exists() else ""


def make_world(root: Path, **incidents: Any) -> World:
    """Identity (the flight manifest: the halting agent's second search is out of it), and a collector
    config with auth, scope and the analysis worker writing incidents under ``root/incidents``."""
    creds = issue_identity(root)
    config = write_config(root / "collector.yaml", store=f"chdb://{root / 'store'}",
                          org_public_key=creds[semconv.ENV_ORG_PUBLIC_KEY], scope={})
    doc = yaml.safe_load(config.read_text())
    doc["extensions"]["agentreplay_analysis"] = {"poll_interval": "200ms",
                                                 "incidents": {"dir": str(root / "incidents"), **incidents}}
    doc["service"]["extensions"].append("agentreplay_analysis")
    config.write_text(yaml.safe_dump(doc))
    return World(root=root, config=config, incidents=root / "incidents", creds=creds, caps=incidents)


@contextmanager
def running(world: World) -> Iterator[CollectorProcess]:
    collector = world.start()
    try:
        yield collector
    finally:
        collector.stop()


def halted_runs(collector: CollectorProcess, expected: int, timeout_s: float = 90.0) -> list[str]:
    """The ids of the stored halted runs, once there are ``expected`` of them."""
    deadline = time.monotonic() + timeout_s
    while True:
        with collector.client() as client:
            runs = [r.run_id for r in client.list_runs(limit=1000) if r.halted]
        if len(runs) >= expected or time.monotonic() > deadline:
            return sorted(runs)
        time.sleep(0.3)


def folders(world: World) -> list[str]:
    return sorted(p.name for p in world.incidents.iterdir()) if world.incidents.exists() else []


def wait_for(check: Any, what: str, world: World, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"{what}; folders {folders(world)}; log:\n{world.log()}"
        time.sleep(0.3)


def assert_whole(folder: Path) -> None:
    names = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    assert set(WHOLE) <= names, (folder, sorted(names))
    assert any(n.startswith("tests/test_") and n.endswith(".py") for n in names), sorted(names)
    assert any(n.startswith("tests/") and n.endswith(".case.json") for n in names), sorted(names)
    for name in ("root-cause.json", "dispute.json", "claim.json"):
        json.loads((folder / name).read_text())  # whole JSON documents
    for name in ("dispute.html", "claim.html", "walkthrough.html"):
        assert (folder / name).read_text().rstrip().endswith("</html>"), name


def stats(collector: CollectorProcess) -> dict[str, Any]:
    with collector.client() as client:
        found: dict[str, Any] = client.stats()["analysis"]
    return found


def stored_incidents(world: World) -> dict[str, Any]:
    """The store's incident records (the collector stopped: chDB lets one process open it)."""
    with Store(f"chdb://{world.root / 'store'}") as store:
        return {i.run_id: i for i in store.verdicts.incidents()}


def test_a_collector_killed_between_verdicts_and_incidents_loses_no_incident(tmp_path):
    """Today: the verdict was stored before the incident, so a run whose collector was killed between
    the two never got one (2 of 10), and a kill mid-write left a half-written folder named after the
    run. Here the first collector stores its verdicts and writes no incident, and is killed (SIGKILL);
    what a writer killed mid-write leaves (a folder aside) is there too. The next start writes every
    incident, whole, once, and sweeps the rest."""
    world = make_world(tmp_path)
    world.write_incidents(False)
    first = world.start()
    runs = 10
    try:
        world.agent(first, runs, '{"flight": "TP123", "price_eur": 129}')
        halted = halted_runs(first, runs)
        wait_for(lambda: stats(first)["analysed_runs"] >= runs, "the runs were not analysed", world)
    finally:
        first.kill()
    assert len(halted) == runs, world.log()
    aside = world.incidents / f"{INCOMING}{halted[0]}-0123456789ab"
    aside.mkdir(parents=True)
    (aside / "claim.json").write_text('{"half": ')  # cut off mid-write
    world.write_incidents(True)
    with running(world) as second:
        wait_for(lambda: set(halted) <= set(folders(world)), "not every halted run got its incident", world)
        wait_for(lambda: stats(second)["incidents_waiting"] == 0, "incidents still due", world)
        counted = stats(second)
    assert folders(world) == halted  # each run's folder, once; nothing half-written or aside is left
    assert counted["incidents_written"] == runs
    for run_id in halted:
        assert_whole(world.incidents / run_id)
    records = stored_incidents(world)
    assert sorted(records) == halted and {r.state for r in records.values()} == {IncidentState.WRITTEN}


def test_a_sigkill_during_a_burst_of_halted_runs_loses_no_incident(tmp_path):
    """Killed (SIGKILL) as its first incident appears, with the agent still halting runs: the collector
    started again on the same ports (the agent's exporter retries there) writes each halted run's
    incident, whole, once, and leaves nothing aside."""
    world = make_world(tmp_path)
    first = world.start()
    runs = 10
    answer = '{"flight": "TP123", "price_eur": 129}'
    agent = world.agent(first, runs, answer, wait=False)
    try:
        deadline = time.monotonic() + 120
        while not (world.incidents.exists() and any(world.incidents.iterdir())):
            assert time.monotonic() < deadline and agent.poll() in (None, 0), f"no incident begun; {world.log()}"
            time.sleep(0.005)
        first.kill()
        second = world.start(where=first)
    finally:
        agent.communicate(timeout=180)
    try:
        halted = halted_runs(second, runs, timeout_s=30)
        if len(halted) < runs:  # runs the agent finished while no collector listened are the agent's loss
            world.agent(second, runs - len(halted), answer)
            halted = halted_runs(second, runs)
        assert len(halted) >= runs, world.log()
        wait_for(lambda: set(halted) <= set(folders(world)), "not every halted run got its incident", world)
        wait_for(lambda: stats(second)["incidents_waiting"] == 0, "incidents still due", world)
    finally:
        second.stop()
    assert folders(world) == halted  # each run's folder, once; nothing half-written or aside is left
    for run_id in halted:
        assert_whole(world.incidents / run_id)
    records = stored_incidents(world)
    assert sorted(records) == halted and {r.state for r in records.values()} == {IncidentState.WRITTEN}


def test_a_folder_that_refuses_writes_gets_every_incident_once_it_takes_them(tmp_path):
    """Today: 4 of 4 incidents were lost for good (logged and counted, never retried)."""
    world = make_world(tmp_path)
    world.incidents.write_text("not a folder")  # the incidents folder refuses every write (even root's)
    with running(world) as collector:
        world.agent(collector, 4, '{"flight": "TP123"}')
        halted = halted_runs(collector, 4)
        assert len(halted) == 4
        wait_for(lambda: stats(collector)["incidents_waiting"] == 4 and stats(collector)["incidents_failed"] > 0,
                 "the refused incidents are not waiting", world)
        world.incidents.unlink()  # the folder takes writes again: no restart
        wait_for(lambda: folders(world) == halted, "the waiting incidents were not written", world)
        wait_for(lambda: stats(collector)["incidents_kept"] == 4, "the kept incidents were not counted", world)
        counted = stats(collector)
    assert counted["incidents_written"] == 4 and counted["incidents_waiting"] == 0 and counted["incidents_kept"] == 4
    for run_id in halted:
        assert_whole(world.incidents / run_id)
    assert not [n for n in folders(world) if n.startswith(".")]


def test_a_large_tool_result_is_written_once_whole_and_clipped_elsewhere(tmp_path):
    """Today: one halted run with a 256 KiB tool result became 1.1 MB (the result four times)."""
    world = make_world(tmp_path)
    big = "x" * (256 * 1024)
    with running(world) as collector:
        world.agent(collector, 1, big)
        [run_id] = halted_runs(collector, 1)
        wait_for(lambda: (world.incidents / run_id / "walkthrough.html").exists(), "no incident", world)
        wait_for(lambda: stats(collector)["incidents_kept"] == 1, "the incident was not counted", world)
        counted = stats(collector)
    folder = world.incidents / run_id
    [case_file] = (folder / "tests").glob("*.case.json")
    assert big in case_file.read_text()  # the case is the evidence: whole
    for name in ("dispute.json", "claim.json"):
        packet = json.loads((folder / name).read_text())
        results = [a["result"] for a in packet["actions" if name == "dispute.json" else "timeline"]
                   if a.get("kind") == "tool" and a.get("result")]
        clipped = [r for r in results if "x" * 100 in r]  # the result as recorded: a JSON string
        assert clipped and all(len(r) < VALUE_LIMIT + 200 and "the whole value is in the case file" in r
                               for r in clipped), name
    total = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    assert total < case_file.stat().st_size + 200 * 1024, total  # the result once, not four times
    assert counted["incidents_kept_bytes"] == total


def test_the_caps_remove_the_oldest_first_per_agent_and_in_all(tmp_path):
    world = make_world(tmp_path, max_per_agent=3, max_total=5)
    with running(world) as collector:
        world.agent(collector, 5, '{"flight": "TP123"}')  # flight-booker: 5 halted runs, its 3 newest kept
        halted_runs(collector, 5)
        wait_for(lambda: stats(collector)["incidents_written"] == 5 and stats(collector)["incidents_waiting"] == 0,
                 "the first agent's incidents were not written", world)
        # retention follows the round's writes: its removals, then the folders, settle after them
        wait_for(lambda: stats(collector)["incidents_removed"] == 2, "the per-agent cap removed nothing", world)
        assert len(folders(world)) == 3
        world.agent(collector, 3, '{"flight": "TP123"}', agent_id="other-agent")  # 3 more: past the total cap (5)
        everything = halted_runs(collector, 8)
        wait_for(lambda: stats(collector)["incidents_written"] == 8 and stats(collector)["incidents_waiting"] == 0,
                 "the second agent's incidents were not written", world)
        wait_for(lambda: stats(collector)["incidents_removed"] == 3, "the total cap removed nothing", world)
        counted = stats(collector)
        with collector.client() as client:
            started = {r.run_id: r.start_ns for r in client.list_runs(limit=1000)}
    records = stored_incidents(world)
    written = [r for r in records.values() if r.state is IncidentState.WRITTEN]
    removed = [r for r in records.values() if r.state is IncidentState.REMOVED]
    assert len(everything) == 8 and len(written) == 5 and len(removed) == 3
    assert sorted(r.agent_id for r in written) == ["flight-booker"] * 2 + ["other-agent"] * 3
    assert {r.agent_id for r in removed} == {"flight-booker"}  # the per-agent cap took 2, the total cap 1 more
    # flight-booker's removed incidents are its oldest (its runs are written in the order they started)
    booker = [r for r in written if r.agent_id == "flight-booker"]
    assert max(started[r.run_id] for r in removed) < min(started[r.run_id] for r in booker)
    assert set(folders(world)) == {r.run_id for r in written}
    assert counted["incidents_kept"] == 5 and counted["incidents_removed"] == 3
    assert counted["incidents_kept_bytes"] == sum(r.bytes for r in written)
