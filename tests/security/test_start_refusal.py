"""Attack B1: an agent started with an enforcement configuration that does not verify.

Each attack is what someone who controls an agent's deployment (its files and environment)
would try, to run the agent outside the scope the org signed: edit the signed manifest, drop
its signature, sign it with the agent's own key or another org's, or start with an expired
token or one from another org. The agent runs under the real launcher
(``opentelemetry-instrument``), whose own handling is to log the configurator's exception and
run the program anyway. Required: the agent does not run (non-zero exit, the reason in one
line on stderr, the tool body never ran), unless fail-open is configured explicitly; then it
runs recorded and the collector stores why.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from securitykit import DEAD, LEDGER_AGENT, MANIFEST, Org, launch

from agentreplay_dev.collector import CollectorProcess, write_config
from agentreplay_otel import identity, semconv

REFUSAL = "agentreplay: the agent does not start: "


def _edited(org: Org, env: dict[str, str], tmp: Path) -> None:
    signed = json.loads(Path(env[semconv.ENV_MANIFEST]).read_text())
    signed["manifest"]["tools"]["book"]["max_per_run"] = 1000  # widen the scope, keep the signature
    signed["manifest"]["tools"]["wire_money"] = {}
    Path(env[semconv.ENV_MANIFEST]).write_text(json.dumps(signed))


def _unsigned(org: Org, env: dict[str, str], tmp: Path) -> None:
    Path(env[semconv.ENV_MANIFEST]).write_text(json.dumps(MANIFEST))  # the bare body, no signature


def _signature_stripped(org: Org, env: dict[str, str], tmp: Path) -> None:
    Path(env[semconv.ENV_MANIFEST]).write_text(json.dumps({"manifest": MANIFEST, "signature": ""}))


def _agent_signed(org: Org, env: dict[str, str], tmp: Path) -> None:
    agent_key = identity.load_private_key(env[semconv.ENV_AGENT_KEY])
    Path(env[semconv.ENV_MANIFEST]).write_text(json.dumps(identity.sign_manifest(MANIFEST, agent_key)))


def _other_org_manifest(org: Org, env: dict[str, str], tmp: Path) -> None:
    other = identity.generate_key()
    Path(env[semconv.ENV_MANIFEST]).write_text(json.dumps(identity.sign_manifest(MANIFEST, other)))


def _other_org_manifest_without_kid(org: Org, env: dict[str, str], tmp: Path) -> None:
    signed = identity.sign_manifest(MANIFEST, identity.generate_key())
    del signed["kid"]  # no key id to give it away: the signature itself must fail
    Path(env[semconv.ENV_MANIFEST]).write_text(json.dumps(signed))


def _expired_token(org: Org, env: dict[str, str], tmp: Path) -> None:
    agent_key = identity.load_private_key(env[semconv.ENV_AGENT_KEY])
    Path(env[semconv.ENV_IDENTITY]).write_text(identity.issue_identity(
        org_key=org.key, agent_id="ledger", agent_public_key=agent_key.public_key(),
        manifest_sha256=identity.manifest_sha256(MANIFEST), ttl_s=3600, now=int(time.time()) - 7200,
    ))


def _other_org_token(org: Org, env: dict[str, str], tmp: Path) -> None:
    agent_key = identity.load_private_key(env[semconv.ENV_AGENT_KEY])
    Path(env[semconv.ENV_IDENTITY]).write_text(identity.issue_identity(
        org_key=identity.generate_key(), agent_id="ledger", agent_public_key=agent_key.public_key(),
        manifest_sha256=identity.manifest_sha256(MANIFEST),
    ))


def _someone_elses_key(org: Org, env: dict[str, str], tmp: Path) -> None:
    identity.write_private_key(identity.generate_key(), Path(env[semconv.ENV_AGENT_KEY]))


def _token_without_key(org: Org, env: dict[str, str], tmp: Path) -> None:
    del env[semconv.ENV_AGENT_KEY]  # a certificate alone: it could authenticate nothing, so nothing is recorded


def _no_org_key(org: Org, env: dict[str, str], tmp: Path) -> None:
    del env[semconv.ENV_ORG_PUBLIC_KEY]  # nothing to check the manifest against


ATTACKS: dict[str, tuple[Callable[[Org, dict[str, str], Path], None], str]] = {
    "edited manifest": (_edited, "manifest signature does not verify"),
    "unsigned manifest": (_unsigned, "not a signed manifest"),
    "signature stripped": (_signature_stripped, "manifest signature does not verify"),
    "agent-signed manifest": (_agent_signed, "not by the org key"),
    "other-org manifest": (_other_org_manifest, "not by the org key"),
    "other-org manifest, no kid": (_other_org_manifest_without_kid, "manifest signature does not verify"),
    "expired token": (_expired_token, "identity token has expired"),
    "other-org token": (_other_org_token, "does not verify against the org key"),
    "someone else's agent key": (_someone_elses_key, "the agent key is not the key named in the identity token"),
    "manifest without org key": (_no_org_key, "signature cannot be checked"),
    "identity token without its key": (_token_without_key, "authenticates nothing alone"),
}


def _env(env: dict[str, str], ledger: Path) -> dict[str, str]:
    return env | {
        "LEDGER": str(ledger),
        "OTEL_EXPORTER_OTLP_ENDPOINT": DEAD,
        "OTEL_EXPORTER_OTLP_INSECURE": "true",
        semconv.ENV_COLLECTOR: DEAD,
    }


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_an_agent_whose_configuration_does_not_verify_does_not_run(org: Org, tmp_path: Path, attack: str):
    tamper, reason = ATTACKS[attack]
    _, env = org.agent("ledger")
    tamper(org, env, tmp_path)
    ledger = tmp_path / "ledger.txt"
    done = launch(LEDGER_AGENT, env=_env(env, ledger))
    assert done.returncode == 2, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(REFUSAL) and reason in lines[0], done.stderr
    assert "Traceback" not in done.stderr and "Failed to auto initialize" not in done.stderr
    assert not ledger.exists() and done.stdout == ""  # the tool body never ran; nothing of the agent did


def test_an_unknown_start_fail_mode_is_refused_too(org: Org, tmp_path: Path):
    _, env = org.agent("ledger")
    _edited(org, env, tmp_path)
    ledger = tmp_path / "ledger.txt"
    done = launch(LEDGER_AGENT, env=_env(env, ledger) | {semconv.ENV_START_FAIL_MODE: "opne"})
    assert done.returncode == 2 and semconv.ENV_START_FAIL_MODE in done.stderr, done.stderr
    assert not ledger.exists()


def test_a_valid_configuration_still_runs(org: Org, tmp_path: Path):
    _, env = org.agent("ledger")
    ledger = tmp_path / "ledger.txt"
    done = launch(LEDGER_AGENT, env=_env(env, ledger) | {"OTEL_TRACES_EXPORTER": "none"})
    assert done.returncode == 0, done.stderr
    assert ledger.read_text() == "TP123\n"


@pytest.mark.e2e
def test_fail_open_runs_recorded_and_the_collector_stores_why(org: Org, tmp_path: Path):
    """Explicit fail-open: the agent runs without the manifest that did not verify; the collector
    (auth on, manifests required and known to it) records the run, and why, with every span."""
    _, env = org.agent("ledger")
    genuine = tmp_path / "manifests"
    genuine.mkdir()
    (genuine / "ledger.json").write_text(Path(env[semconv.ENV_MANIFEST]).read_text())
    _edited(org, env, tmp_path)
    config = write_config(
        tmp_path / "c.yaml", store=f"chdb://{tmp_path / 'store'}", org_public_key=org.public_path,
        scope={"require_manifests": True, "manifests_dir": str(genuine)},
    )
    ledger = tmp_path / "ledger.txt"
    with CollectorProcess(config) as collector:
        agent_env = _env(env, ledger) | {
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{collector.grpc}",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            semconv.ENV_COLLECTOR: collector.control,
            semconv.ENV_START_FAIL_MODE: "open",
        }
        done = launch(LEDGER_AGENT, env=agent_env)
        assert done.returncode == 0, done.stderr
        assert ledger.read_text() == "TP123\n"
        assert "manifest signature does not verify" in done.stderr  # said once, at start
        run_id = done.stdout.split("run ", 1)[1].split()[0]
        assert run_id != "0" * 32
        with collector.client() as client:
            run = _judged(client, run_id)
            spans = client.get_run_spans(run_id)
    assert run.chain.intact and run.chain.seal == "valid"
    assert {s.name for s in spans} == {"invoke_agent ledger_agent", "execute_tool book"}
    reasons = {s.resource.get(semconv.START_ERROR, "") for s in spans}
    assert len(reasons) == 1 and "manifest signature does not verify" in reasons.pop()


def _judged(client, run_id: str, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run = client.get_run(run_id)
        if run is not None and run.chain.status.value != "pending":
            return run
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} was never judged")
