"""The first seconds after a run (issue 33): `verify` and `export` right after a sealed run's spans are
acknowledged, before the collector has judged it (the default 2 s quiet period), by a new agent key
each time (its certificate first seen with that run).

`verify RUN --org-key` says INTACT (the certificate an export brought is stored before that export is
acknowledged) or PENDING, never BROKEN; `export RUN` waits for the verdict and the log proof, so the case
it writes verifies; with --no-wait it refuses, naming why, rather than write a case that cannot.
"""

from __future__ import annotations

import pytest
from logkit import KINDS, Org, cli, log_config, said, send_runs

from agentreplay_dev.collector import CollectorProcess, IssuedAgent
from agentreplay_otel.core import semconv

RUNS = 5


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("after")
    org = Org.create(tmp / "org")
    org.certify_log_key(tmp / "log")
    config = log_config(tmp / "c.yaml", store=tmp / "store", org=org, log_dir=tmp / "log",
                        chain={"quiet_period": "2s"}, scope={})  # the default quiet period; decisions served
    with CollectorProcess(config) as collector:
        yield collector, org, tmp


def _env(collector: CollectorProcess, org: Org) -> dict[str, str]:  # the org key is given as --org-key
    return {semconv.ENV_COLLECTOR: collector.control}


def test_verify_and_export_right_after_a_run_never_cry_tamper(world):
    collector, org, tmp = world
    for i in range(RUNS):
        agent = IssuedAgent.issue(org.key, f"booker-{i}")  # a new key: its certificate comes with this run
        (run_id,) = send_runs(collector, agent, KINDS[:1])  # returns once the export is acknowledged
        verified = cli("verify", run_id, "--org-key", str(org.public), env=_env(collector, org))
        assert "BROKEN" not in said(verified), said(verified)
        assert verified.returncode in (0, 3), said(verified)
        case = tmp / f"run-{i}.case.json"
        exported = cli("export", run_id, "-o", str(case), env=_env(collector, org))
        assert exported.returncode == 0, said(exported)
        checked = cli("verify", str(case), "--org-key", str(org.public))
        assert checked.returncode == 0, said(checked)
        assert "leaf" in said(exported), said(exported)  # it carries its log proof


def test_export_without_waiting_refuses_a_run_not_yet_verified(world):
    collector, org, tmp = world
    (run_id,) = send_runs(collector, IssuedAgent.issue(org.key, "booker-now"), KINDS[:1])
    case = tmp / "now.case.json"
    exported = cli("export", run_id, "-o", str(case), "--no-wait", env=_env(collector, org))
    assert exported.returncode == 2, said(exported)  # refused, as any CLI error
    assert "still being verified" in said(exported)
    assert not case.exists()
