"""``agentreplay testgen`` and the pytest plugin, end to end on the flight story (issue 11, items 2 and 3).

The story (asked for Friday at the best price; booked Saturday; a second ticket refused; halted) is
recorded once through the real launcher and collector (``conftest.flight``). ``testgen`` writes a
test and the case beside it; the test is then run by pytest in a subprocess with no store and no
collector, the airline's scripted model as the endpoint for live calls: it FAILS on the agent as
recorded, naming the MAST mode and the violated constraint, and PASSES on the one-line-fixed agent.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from agentreplay_dev.scenario import AGENT, BIN, fixed_agent
from agentreplay_incident import case as casefile
from agentreplay_replay.cli._client import RemoteCollector

TIMEOUT_S = 240


def offline_env() -> dict[str, str]:
    """No store, no collector, no agent identity: what a CI job has."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTREPLAY_"))}


def run_testgen(flight, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "agentreplay"), "testgen", *args], env=env or flight.world.env,
                          capture_output=True, text=True, timeout=TIMEOUT_S)


def run_pytest(flight, folder: Path, *options: str, env: dict[str, str] | None = None,
               junit: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The generated suite, as CI runs it: its own pytest process, the model server as the test endpoint."""
    model = flight.world.model
    cmd = [sys.executable, "-m", "pytest", str(folder), "-q", "-p", "no:cacheprovider", "-o", "addopts=",
           f"--agentreplay-model-url={model.base_url_openai}", f"--agentreplay-anthropic-url={model.base_url_anthropic}",
           f"--agentreplay-org-key={flight.org_public}", *options]
    if junit is not None:
        cmd.append(f"--junitxml={junit}")
    return subprocess.run(cmd, env=env or offline_env(), capture_output=True, text=True, timeout=TIMEOUT_S,
                          cwd=folder)


@pytest.fixture(scope="module")
def suite(flight, tmp_path_factory) -> Path:
    """The story's regression test, written by ``agentreplay testgen RUN`` (through the collector)."""
    folder = tmp_path_factory.mktemp("regressions")
    done = run_testgen(flight, flight.run_id[:12], "-o", str(folder), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    return folder


def generated(folder: Path) -> tuple[Path, Path]:
    [test] = folder.glob("test_*.py")
    [case] = folder.glob("*.case.json")
    return test, case


def test_testgen_writes_a_readable_test_and_its_case(suite, flight):
    test, case = generated(suite)
    assert test.name == f"test_flight_booker_{flight.run_id[:8]}.py"
    assert casefile.read(case).run_id == flight.run_id
    text = test.read_text()
    compile(text, str(test), "exec")
    # semantic: the violated constraint, written out, tagged with its MAST mode
    assert '@pytest.mark.mast("FM-1.1")' in text
    assert 'regression.arguments("book_flight", "day")' in text and '== "friday"' in text
    # structural: from the signed manifest
    assert 'regression.count("book_flight") <= 1' in text
    for name in ("test_only_tools_the_manifest_lists", "test_no_scope_violation", "test_not_halted",
                 "test_within_the_step_bound", "test_no_uncaught_exception"):
        assert f"def {name}(regression):" in text
    assert len(text.splitlines()) < 120  # short enough to read in one screen or two


def test_the_generated_test_fails_on_the_agent_as_recorded(suite, flight, tmp_path):
    junit = tmp_path / "junit.xml"
    requests, bookings = flight.world.model.request_count, flight.world.bookings()
    done = run_pytest(flight, suite, "--agentreplay-recorded-command", junit=junit)
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    # it names the MAST mode and the violated constraint
    assert "FM-1.1 disobey task specification: the request says" in out and "book_flight got day='Saturday'" in out
    assert re.search(r"FAILED \S+::test_book_flight_day_keeps_to_the_request", out)
    for name in ("test_tool_counts_within_the_manifest", "test_no_scope_violation", "test_no_uncaught_exception"):
        assert re.search(rf"FAILED \S+::{name}", out), name  # the second ticket, refused
    # the recorded agent matches its recording: no live call, nothing booked
    assert flight.world.model.request_count == requests and flight.world.bookings() == bookings
    # the junit report carries each test's MAST mode
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    props = {p.get("name"): p.get("value") for p in cases["test_book_flight_day_keeps_to_the_request"].iter("property")}
    assert props == {"mast": "FM-1.1 disobey task specification"}


def test_the_generated_test_passes_on_the_fixed_agent(suite, flight, tmp_path):
    fixed = fixed_agent(tmp_path / "flight_agent.py")
    bookings = flight.world.bookings()
    done = run_pytest(flight, suite, f"--agentreplay-agent={sys.executable} {fixed}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert " passed" in done.stdout and "failed" not in done.stdout
    assert flight.world.bookings() == bookings  # after the divergence the model is live; tools stay sandboxed


def test_a_tampered_case_is_refused_by_testgen_and_by_the_generated_test(suite, flight, tmp_path):
    test, case = generated(suite)
    doc = json.loads(case.read_text())
    booking = next(s for s in doc["spans"] if s["name"] == "execute_tool book_flight")
    key = next(k for k in booking["attributes"] if k.endswith("tool.call.arguments"))
    booking["attributes"][key] = booking["attributes"][key].replace("Saturday", "Friday")
    folder = tmp_path / "tampered"
    folder.mkdir()
    (folder / test.name).write_text(test.read_text())
    (folder / case.name).write_text(json.dumps(doc))
    done = run_pytest(flight, folder)
    assert done.returncode == 1 and "CaseRefused" in done.stdout and "does not check" in done.stdout, done.stdout
    assert " passed" not in done.stdout
    again = run_testgen(flight, str(folder / case.name), "-o", str(tmp_path / "out"), env=offline_env()
                    | {"AGENTREPLAY_ORG_PUBLIC_KEY": str(flight.org_public)})
    assert again.returncode == 2 and "does not verify" in again.stderr, again.stdout + again.stderr
    assert not (tmp_path / "out").exists()


def test_testgen_from_a_case_file_writes_the_same_test_offline(suite, flight, tmp_path):
    test, case = generated(suite)
    done = run_testgen(flight, str(case), "-o", str(tmp_path), "--org-key", str(flight.org_public), env=offline_env())
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / test.name).read_text() == test.read_text()


def test_a_run_with_no_failure_gets_a_test_pinning_its_good_behaviour(flight, tmp_path):
    """The fixed agent's run (Friday booked, nothing refused): its booking is pinned, the test passes on it."""
    fixed = fixed_agent(tmp_path / "flight_agent.py")
    world = flight.world
    done = subprocess.run([str(BIN / "opentelemetry-instrument"), sys.executable, str(fixed),
                           "Book me a flight to Lisbon on Friday."], env=world.env, capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    run_id = world.newest_verified_run()
    folder = tmp_path / "good"
    made = run_testgen(flight, run_id, "-o", str(folder))
    assert made.returncode == 0, made.stdout + made.stderr
    text = generated(folder)[0].read_text()
    assert "def test_the_analysis_finds_no_failure(regression):" in text
    assert re.search(r'regression\.tool_calls\("book_flight"\).*== \[\{"flight": "TP123", "day": "Friday"', text)
    ran = run_pytest(flight, folder, f"--agentreplay-agent={sys.executable} {fixed}")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    worse = run_pytest(flight, folder, f"--agentreplay-agent={sys.executable} {AGENT}")  # the unfixed agent
    assert worse.returncode == 1 and "test_book_flight_as_recorded" in worse.stdout, worse.stdout


def test_a_generated_tests_regression_run_counts_in_the_trust_score(suite, flight, tmp_path):
    """With a collector given, the regression run is exported (run kind regression, replaying the story)
    and the trust score counts it."""
    world = flight.world
    with RemoteCollector(world.collector.control) as client:
        before = client.trust("flight-booker")["agents"][0]["regressions"]
    fixed = fixed_agent(tmp_path / "flight_agent.py")
    env = world.env  # the agent's identity, so the collector takes its run
    done = run_pytest(flight, suite, f"--agentreplay-agent={sys.executable} {fixed}",
                      f"--agentreplay-collector={world.collector.control}", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    with world.collector.client() as reader:
        runs = [r for r in reader.list_runs(limit=50) if r.run_kind == "regression" and r.replay_of == flight.run_id]
    assert runs, "the regression run was not exported"
    with RemoteCollector(world.collector.control) as client:
        assert client.trust("flight-booker")["agents"][0]["regressions"] == before + 1
