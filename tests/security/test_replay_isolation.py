"""A replayed agent is the least trusted process: the operator's secrets reach it by no route.

A production deployment (``init --production --tls``, the collector it configures), a run recorded by an
agent issued with the printed commands, then ``agentreplay replay RUN -- python hostile_agent.py`` run with
the environment ``init`` printed for the CLI. The agent looks where an agent running as the CLI's user
would (its own environment, every ancestor's ``/proc`` environment and command line, every file a variable
names and the ``*.key``/``*.token`` beside it and above it) and writes what it found. The tests run as
root, so file modes and ``PR_SET_DUMPABLE`` stop nothing here: what holds is that the CLI re-executed itself
without the operator's settings and that the agent's variables name copies, not the set-up's folders.
"""

from __future__ import annotations

import json
import re
import ssl
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_tls import Deployment, deploy, run_of, sh, wait_for_verdict

pytestmark = pytest.mark.e2e
AGENTS = Path(__file__).parent / "agents"
SDK = Path(__file__).resolve().parents[2] / "src" / "agentreplay_otel"


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    yield from deploy(tmp_path_factory.mktemp("isolation"), "--tls")


@pytest.fixture(scope="module")
def recorded(tls: Deployment) -> str:
    """A run of the issued agent, stored and judged."""
    agent = sh(f"{tls.agent_env}\nopentelemetry-instrument {sys.executable} {AGENTS / 'ledger_agent.py'}",
               cwd=tls.work, extra={"LEDGER": str(tls.work / "ledger.txt")})
    run_id = run_of(agent)
    wait_for_verdict(tls.collector.control, run_id, tls.admin_token, ssl.create_default_context(cafile=str(tls.ca)))
    return run_id


def secrets_of(tls: Deployment) -> dict[str, str]:
    """What must not reach the agent: the admin token, and the org private key's PEM body."""
    pem = (tls.dir / "keys" / "org.key").read_text()
    return {"admin token": tls.admin_token, "org key": "".join(pem.splitlines()[1:-1])}


@pytest.mark.parametrize("given", ["as init printed it", "in the environment"])
def test_a_replayed_agent_finds_none_of_the_operators_secrets(
    tls: Deployment, recorded: str, tmp_path: Path, given: str
) -> None:
    out = tmp_path / "found.json"
    token = f"$(cat {tls.dir / 'admin.token'})"
    extra = {"in the environment": f'export AGENTREPLAY_ADMIN_TOKEN="{token}"'}.get(given, "")
    command = f"agentreplay replay {recorded} -- {sys.executable} {AGENTS / 'hostile_agent.py'} {out}"
    replayed = tls.cli(command, extra=extra)
    assert out.exists(), replayed.stdout + replayed.stderr
    text = out.read_text()
    found = json.loads(text)
    assert found["environs"] and any(found["environs"].values()), "the probe read no ancestor's environment"
    for what, secret in secrets_of(tls).items():
        assert secret not in text, f"the agent found the {what}: {_where(found, secret)}"
    assert str(tls.dir) not in json.dumps(found["own"]) + json.dumps(found["environs"]), \
        "a variable names the set-up's folder"
    assert found["grant"], "the CLI lost the admin token on the way: no replay grant"


def _where(found: dict[str, object], secret: str) -> list[str]:
    """Which of the places the agent read held ``secret``."""
    places: list[str] = []
    for kind in ("environs", "cmdlines", "files"):
        places += [f"{kind}:{k}" for k, v in found[kind].items() if v and secret in v]  # type: ignore[attr-defined]
    return places + (["own environment"] if secret in json.dumps(found["own"]) else [])


def test_every_variable_the_sdk_reads_is_classified() -> None:
    """An ``AGENTREPLAY_*`` name the SDK reads is the agent's only once listed: a new one not listed would be
    dropped from every replayed agent's environment without anyone deciding it."""
    from agentreplay_replay import isolation

    names = set()
    for path in SDK.rglob("*.py"):
        names |= set(re.findall(r'"(AGENTREPLAY_[A-Z0-9_]+)"', path.read_text()))
    cli_only = {"AGENTREPLAY_REQUIRE_LOG_PROOF", "AGENTREPLAY_OPERATOR_FD"} | {
        n for n in names if n.startswith("AGENTREPLAY_ANALYSIS_")}
    unclassified = names - isolation.AGENT_VARIABLES - set(isolation.OPERATOR_VARIABLES) - cli_only
    assert not unclassified, f"say whether a replayed agent gets these: {sorted(unclassified)}"
    assert not isolation.AGENT_VARIABLES & set(isolation.OPERATOR_VARIABLES)


def test_an_admin_token_on_the_command_line_is_carried_not_shown() -> None:
    """``blame`` and ``models`` take ``--admin-token``: a re-execution leaves it off the command line
    (``/proc/PID/cmdline``) and hands it over as the variable the option also reads; the agent's own
    arguments, after ``--``, are not touched."""
    from agentreplay_replay import isolation

    argv = ["python", "agentreplay", "blame", "RUN", "--admin-token", "s3cret", "--", "agent.py", "--admin-token=x"]
    assert isolation._without_token(argv) == (
        ["python", "agentreplay", "blame", "RUN", "--", "agent.py", "--admin-token=x"],
        {"AGENTREPLAY_ADMIN_TOKEN": "s3cret"})
    assert isolation._without_token(["agentreplay", "models", "--admin-token=s3cret"]) == (
        ["agentreplay", "models"], {"AGENTREPLAY_ADMIN_TOKEN": "s3cret"})
