"""Ids are checked wherever they enter (issue 25, item 1): a run id (a trace id) is 32 lower-case hex
digits, a span id 16; anything else is refused.

The attack: an agent holding its own certified key records a run, rewrites the run's id to one that
holds a triple quote and a statement, re-chains and re-seals it, and hands over the case. Before,
``verify --org-key`` passed, ``testgen`` wrote the test, and collecting that test ran the statement
(the id was pasted into the module docstring). Now the case is refused when it is read, the verifier
calls the run forged, and testgen writes nothing. The run is recorded by the real SDK (chain and
seal), and ``verify`` and ``testgen`` are the CLI in a subprocess.

The collector refuses the same ids where they come in: an OTLP export naming a run that is not a run
id (``agentreplay.replay.of``) or linking to malformed ids, and a read or control request naming one.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from securitykit import BIN, Org

import agentreplay_otel
from agentreplay_client.models import ChainState, ChainStatus, RunSummary
from agentreplay_dev.collector import CollectorProcess, call_control, export_http, write_config
from agentreplay_incident import case as casefile
from agentreplay_incident import testgen
from agentreplay_otel import identity, semconv
from agentreplay_otel.canonical import SpanRecord
from agentreplay_otel.chain import record_from_span
from agentreplay_otel.core import (
    GENESIS_HASH,
    ChainProblem,
    is_parent_span_id,
    is_span_id,
    is_trace_id,
    is_trace_id_prefix,
    link_hash,
    normal_trace_id,
    verify,
)

RUN = "ab" * 16
SPAN = "cd" * 8
ADMIN = "admin-token-for-id-tests"


# --- the one definition -----------------------------------------------------------------------------------
def test_what_an_id_is():
    assert is_trace_id(RUN) and is_span_id(SPAN) and is_parent_span_id("") and is_parent_span_id(SPAN)
    for bad in (RUN.upper(), RUN[:-1], RUN + "0", "g" * 32, f" {RUN[1:]}", f"{RUN[:-1]}\n", 'ab"""' + "0" * 27,
                "٣" * 32, None, 123):
        assert not is_trace_id(bad), bad
    assert not is_span_id(RUN) and not is_span_id(SPAN.upper()) and not is_parent_span_id("0")
    assert normal_trace_id(RUN.upper()) == RUN and normal_trace_id('"""') is None and normal_trace_id("İ" * 32) is None
    assert is_trace_id_prefix("3f2a") and not is_trace_id_prefix("") and not is_trace_id_prefix("3F") \
        and not is_trace_id_prefix("0" * 33)


def test_the_recorder_refuses_to_name_a_replayed_run_by_anything_but_a_run_id():
    """The collector refuses such an export; the recorder says so when the run is opened."""
    with pytest.raises(ValueError, match="replay_of must be a run id"):
        agentreplay_otel.run("booker", kind=semconv.RUN_KIND_REPLAY, replay_of='ab"""; x')
    assert agentreplay_otel.run("booker", kind=semconv.RUN_KIND_REPLAY, replay_of=RUN.upper()).replay_of == RUN


# --- a run re-sealed under a hostile id -------------------------------------------------------------------
@agentreplay_otel.tool(side_effect=True)
def book(flight: str) -> dict:
    return {"flight": flight, "status": "booked"}


def seq(record: SpanRecord) -> int:
    return int(record.attributes[semconv.CHAIN_SEQ])


def resealed(records: list[SpanRecord], run_id: str, key: identity.Ed25519PrivateKey) -> list[SpanRecord]:
    """What the agent can do with its own key: the run under another id, re-chained and re-sealed."""
    out, prev = [], GENESIS_HASH
    for r in sorted(records, key=seq):
        attrs = {k: v for k, v in r.attributes.items() if k != semconv.CHAIN_SEAL}
        attrs[semconv.CHAIN_PREV] = prev
        moved = dataclasses.replace(r, trace_id=run_id, attributes=attrs)
        prev = attrs[semconv.CHAIN_HASH] = link_hash(prev, moved)
        if moved.is_root:
            payload = identity.seal_payload(run_id=run_id, agent_id=r.resource[semconv.AGENT_ID], seq=seq(r),
                                            last_hash=prev, manifest_sha256=attrs.get(semconv.MANIFEST_SHA256, ""))
            attrs[semconv.CHAIN_SEAL] = identity.sign(key, payload)
        out.append(dataclasses.replace(moved, attributes=attrs))
    return out


def case_of(records: list[SpanRecord], certificates: dict[str, str]) -> casefile.Case:
    run_id = records[0].trace_id
    chain = ChainStatus(run_id=run_id, status=ChainState.INTACT, seal="valid", span_count=len(records))
    summary = RunSummary(run_id=run_id, agent_id="agent-test", agent_name="booker", service_name="booker",
                         run_kind="record", name="invoke_agent booker", start_ns=min(r.start_ns for r in records),
                         end_ns=max(r.end_ns for r in records), span_count=len(records), status_code="Unset",
                         cost_usd=0.0, chain=chain)
    return casefile.Case(run_id=run_id, exported_ns=0, summary=summary, spans=tuple(records),
                         certificates=certificates, manifest=None, decisions=(), classifications=())


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTREPLAY_", "OTEL_"))}
    return subprocess.run([str(BIN / "agentreplay"), *args], capture_output=True, text=True, timeout=180, env=env)


@pytest.fixture
def signed_run(recorder, org: Org) -> tuple[list[SpanRecord], dict[str, str]]:
    """A run recorded by the real SDK, sealed with the agent's key, and the org's certificate of that key."""
    with agentreplay_otel.run("booker", input={"ask": "a flight on Friday"}):
        book("TP123")
    records = sorted((record_from_span(s) for s in recorder.spans()), key=seq)
    token = identity.issue_identity(org_key=org.key, agent_id="agent-test", agent_public_key=recorder.key.public_key(),
                                    manifest_sha256="", ttl_s=3600)
    return records, {identity.key_id(recorder.key): token}


def test_a_run_resealed_under_a_hostile_id_is_refused_by_verify_and_testgen(signed_run, recorder, org: Org,
                                                                            tmp_path: Path):
    records, certificates = signed_run
    honest = tmp_path / "honest.case.json"
    casefile.write(case_of(records, certificates), honest)
    done = cli("verify", str(honest), "--org-key", str(org.public_path))
    assert done.returncode == 0, done.stdout + done.stderr  # the agent's own run, under its own key, verifies

    marker = "pwned"  # written where pytest collects, were the statement run (the id is lower case, as ids are)
    hostile_id = f'{"0" * 8}"""\nopen("{marker}", "w").close()\n"""'
    forged = resealed(records, hostile_id, recorder.key)
    path = tmp_path / "hostile.case.json"
    casefile.write(case_of(forged, certificates), path)
    done = cli("verify", str(path), "--org-key", str(org.public_path))
    assert done.returncode == 1 and "REFUSED" in done.stdout and "run_id" in done.stdout, done.stdout + done.stderr

    out = tmp_path / "regressions"
    done = cli("testgen", str(path), "-o", str(out), "--org-key", str(org.public_path))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "not in its stored form" in " ".join(done.stderr.split())
    assert not out.exists() or not list(out.glob("*.py"))

    with pytest.raises(casefile.CaseError, match="not in its stored form"):
        casefile.read(path)
    report = verify(forged, org_key=org.key.public_key(), certificates=certificates, require_seal=True)
    assert report.problem is ChainProblem.FORGED and "trace id" in report.detail, report
    assert report.run_id == "" and report.span_id is None  # the report does not carry the bad id on
    with pytest.raises(testgen.TestgenError, match="not a run id"):  # given the case in memory, unread
        testgen.generate(case_of(forged, certificates), out, org.key.public_key())
    assert not out.exists() or not list(out.glob("*.py"))
    assert not (tmp_path / marker).exists() and not (out / marker).exists()


@pytest.mark.parametrize("field,value", [
    ("trace_id", RUN.upper()), ("span_id", "cd" * 4), ("span_id", 'x"""'), ("parent_span_id", "0" * 15 + "\n"),
])
def test_a_span_with_a_malformed_id_is_a_forged_chain_not_a_crash(signed_run, field: str, value: str):
    records, _ = signed_run
    edited = [dataclasses.replace(records[0], **{field: value}), *records[1:]]
    if field == "trace_id":
        edited = [dataclasses.replace(r, trace_id=value) for r in records]
    report = verify(edited)
    assert report.problem is ChainProblem.FORGED and field.replace("_", " ") in report.detail, report
    assert report.seq == seq(records[0]) and report.span_id is None


def test_a_case_with_a_malformed_id_anywhere_is_refused_on_reading(signed_run, tmp_path: Path):
    records, certificates = signed_run
    doc = case_of(records, certificates).to_json()
    edits = {
        "run_id": lambda d: d.update(run_id="x" * 32),
        "run": lambda d: d["run"].update(replay_of="../../etc"),
        "spans[1]": lambda d: d["spans"][1].update(parent_span_id='"'),
        "decisions": lambda d: d["decisions"].append(
            {"time_ns": "1", "run_id": RUN, "span_id": "Z" * 16, "agent_id": "a", "tool": "t", "decision": "deny",
             "rule": "r", "manifest_sha256": "", "detail": "", "source": "local"}),
    }
    for where, edit in edits.items():
        changed = json.loads(json.dumps(doc))
        edit(changed)
        path = tmp_path / f"{where}.case.json"
        path.write_text(json.dumps(changed))
        with pytest.raises(casefile.CaseError, match=r"not in its stored form .* in " + where.replace("[", r"\[")):
            casefile.read(path)


# --- the collector ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CollectorProcess]:
    tmp = tmp_path_factory.mktemp("ids")
    config = write_config(tmp / "c.yaml", store=f"chdb://{tmp / 'store'}", scope={"admin_token": ADMIN})
    with CollectorProcess(config) as running:
        yield running


def otlp(attributes: dict[str, str], links: list[dict[str, str]] | None = None) -> bytes:
    span = {"traceId": "12" * 16, "spanId": "34" * 8, "name": "invoke_agent booker", "kind": 1,
            "startTimeUnixNano": "1700000000000000000", "endTimeUnixNano": "1700000000000000001",
            "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attributes.items()],
            "links": links or []}
    return json.dumps({"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"spans": [span]}]}]}).encode()


@pytest.mark.e2e
def test_otlp_refuses_a_span_naming_a_run_that_is_not_a_run_id(collector: CollectorProcess):
    def export(body: bytes) -> int:
        return export_http(collector.http, body, content_type="application/json")[0]

    hostile = 'ab"""; __import__("os")'
    assert export(otlp({semconv.RUN_KIND: "replay", semconv.REPLAY_OF: hostile})) == 400
    assert export(otlp({semconv.REPLAY_OF: RUN.upper()})) == 400  # stored ids are lower case, as the recorder writes
    assert export(otlp({}, links=[{"traceId": "abcd", "spanId": SPAN}])) == 400
    assert export(otlp({semconv.RUN_KIND: "replay", semconv.REPLAY_OF: RUN}, links=[{"traceId": RUN, "spanId": SPAN}])) \
        == 200


@pytest.mark.e2e
def test_read_and_control_requests_naming_a_malformed_run_id_answer_400(collector: CollectorProcess):
    hostile = urllib.parse.quote('ab"""; x', safe="")
    for path in (f"/v1/runs/{hostile}", f"/v1/runs/{hostile}/spans", f"/v1/log/runs/{hostile}",
                 f"/v1/classifications?run={hostile}", f"/v1/decisions?run={hostile}", "/v1/decisions"):
        status, answer = call_control(collector.control, path, token=ADMIN)
        assert status == 400, (path, status, answer)
    assert call_control(collector.control, f"/v1/runs/{RUN.upper()}", token=ADMIN)[0] == 404  # typed ids: any case
    for path, body in (("/v1/authorize", {"kind": "tool", "tool": "book", "run_id": 'ab"""'}),
                       ("/v1/halts", {"scope": "run", "target": "../" + RUN, "reason": "x"}),
                       ("/v1/resume", {"scope": "run", "target": RUN[:12]})):
        status, answer = call_control(collector.control, path, token=ADMIN, body=body)
        assert status == 400 and "run id" in answer["error"], (path, status, answer)
    status, answer = call_control(collector.control, "/v1/halts", token=ADMIN,
                                  body={"scope": "run", "target": RUN.upper(), "reason": "x"})
    assert status == 200 and answer["target"] == RUN, answer
