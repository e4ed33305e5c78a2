"""Expected outcomes set after a run (``agentreplay expect``): kept beside the run in the store (the
``run_expected`` table, the latest setting counts), served and set through ``/v1/runs/{run_id}/expected``
(set and cleared by an operator only, a bounded JSON body, a clear 400 for anything else), and a run whose
expected outcome changes is analysed again by the collector's worker, held to the value set."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from agentreplay_client.models import (
    MAX_EXPECTED_BYTES,
    ChainState,
    ChainStatus,
    RunSummary,
    StoredClassification,
)
from agentreplay_collector.access import ReadAccess
from agentreplay_collector.analysis import AnalysisWorker
from agentreplay_collector.config import DETECTORS, AnalysisConfig
from agentreplay_collector.readapi import build_app
from agentreplay_collector.store import Store

ADMIN = "expected-admin-token-0123456789"
RUN, OTHER = "a" * 32, "b" * 32
HOSTILE = "</code><script>alert(1)</script>\"'\\\u2028"


def _summary(run_id: str, start_ns: int) -> RunSummary:
    chain = ChainStatus(run_id=run_id, status=ChainState.INTACT, seal="valid", span_count=1)
    return RunSummary(run_id=run_id, agent_id="agent", agent_name="a", service_name="svc", run_kind="record",
                      name="run", start_ns=start_ns, end_ns=start_ns + 1, span_count=1, status_code="Ok",
                      cost_usd=0.0, chain=chain)


@pytest.fixture
def stored_run(chdb_store: Store) -> Store:
    chdb_store.runs.upsert([_summary(RUN, 1_700_000_000_000_000_000)], time.time_ns())
    return chdb_store


def _client(store: Store, *, auth: bool) -> TestClient:
    access = ReadAccess(auth=None, admin_token=ADMIN, insecure=not auth)
    return TestClient(build_app(store, lambda: {}, access=access))


@pytest.fixture
def secured(stored_run: Store) -> Iterator[TestClient]:
    with _client(stored_run, auth=True) as client:
        yield client


def _admin() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN}"}


def test_the_store_keeps_the_latest_setting(chdb_store: Store) -> None:
    assert chdb_store.verdicts.expected_outcome(RUN) is None
    chdb_store.verdicts.set_expected_outcome(RUN, {"day": "Friday", "amount": 12.5})
    assert chdb_store.verdicts.expected_outcome(RUN).expected == {"day": "Friday", "amount": 12.5}
    chdb_store.verdicts.set_expected_outcome(RUN, HOSTILE)
    assert chdb_store.verdicts.expected_outcome(RUN).expected == HOSTILE  # kept exactly, as data
    assert chdb_store.verdicts.clear_expected_outcome(RUN) is True
    assert chdb_store.verdicts.expected_outcome(RUN) is None
    assert chdb_store.verdicts.clear_expected_outcome(RUN) is False
    assert chdb_store.verdicts.expected_outcome(OTHER) is None


def test_set_read_and_clear_with_the_admin_token(secured: TestClient) -> None:
    path = f"/v1/runs/{RUN}/expected"
    assert secured.get(path, headers=_admin()).json() == {"run_id": RUN, "expected": None, "time_ns": None}
    put = secured.put(path, json={"expected": {"flight": "TP123", "day": "Friday"}}, headers=_admin())
    assert put.status_code == 200, put.text
    assert put.json()["expected"] == {"flight": "TP123", "day": "Friday"}
    got = secured.get(path.upper().replace("/V1/RUNS/", "/v1/runs/").replace("/EXPECTED", "/expected"),
                      headers=_admin()).json()  # a run id in capitals is the same run
    assert got["run_id"] == RUN and got["expected"] == {"flight": "TP123", "day": "Friday"}
    assert secured.put(path, json={"expected": HOSTILE}, headers=_admin()).json()["expected"] == HOSTILE
    assert secured.delete(path, headers=_admin()).json() == {"run_id": RUN, "cleared": True}
    assert secured.get(path, headers=_admin()).json()["expected"] is None
    assert secured.delete(path, headers=_admin()).json() == {"run_id": RUN, "cleared": False}


def test_with_auth_on_nothing_is_read_or_changed_without_the_admin_token(secured: TestClient) -> None:
    path = f"/v1/runs/{RUN}/expected"
    for headers in ({}, {"Authorization": "Bearer not-the-token"}):
        assert secured.get(path, headers=headers).status_code == 401
        assert secured.put(path, json={"expected": "x"}, headers=headers).status_code == 401
        assert secured.delete(path, headers=headers).status_code == 401
    assert secured.get(path, headers=_admin()).json()["expected"] is None  # nothing was set


def test_with_auth_off_a_local_reader_is_an_operator(stored_run: Store) -> None:
    with _client(stored_run, auth=False) as client:
        path = f"/v1/runs/{RUN}/expected"
        assert client.put(path, json={"expected": 12.5}).json()["expected"] == 12.5
        assert client.get(path).json()["expected"] == 12.5
        assert client.delete(path).json()["cleared"] is True


def test_bad_bodies_are_a_clear_400(secured: TestClient) -> None:
    path = f"/v1/runs/{RUN}/expected"
    for body, says in ((b"not json", "VALUE"), (b"[1, 2]", "VALUE"), (b'{"expected": null}', "DELETE clears"),
                       (b'{"expected": "  "}', "DELETE clears"), (b'{"value": 1}', "nothing else"),
                       (b'{"expected": 1, "more": 2}', "nothing else"), (b'{"expected": 1e999}', ""),
                       (b'{"expected": ' + b"[" * 200 + b"]" * 200 + b"}", "")):
        answer = secured.put(path, content=body, headers=_admin() | {"Content-Type": "application/json"})
        assert answer.status_code == 400, (body[:40], answer.text)
        assert says in answer.json()["error"], answer.json()
    assert secured.get(f"/v1/runs/{'z' * 32}/expected", headers=_admin()).status_code == 400  # not a run id
    assert secured.get(path, headers=_admin()).json()["expected"] is None


def test_a_body_too_large_is_refused_before_it_is_read_whole(secured: TestClient) -> None:
    path = f"/v1/runs/{RUN}/expected"
    big = json.dumps({"expected": "x" * MAX_EXPECTED_BYTES}).encode()
    answer = secured.put(path, content=big, headers=_admin() | {"Content-Type": "application/json"})
    assert answer.status_code == 413 and "larger than" in answer.json()["error"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it comes
        yield b'{"expected": "'
        for _ in range(MAX_EXPECTED_BYTES // 1024 + 1):
            yield b"y" * 1024
        yield b'"}'

    answer = secured.put(path, content=chunks(), headers=_admin() | {"Content-Type": "application/json"})
    assert answer.status_code == 413
    fits = json.dumps({"expected": "x" * (MAX_EXPECTED_BYTES - 100)}).encode()
    assert secured.put(path, content=fits, headers=_admin()).status_code == 200


def test_an_unknown_run_is_404(secured: TestClient) -> None:
    path = f"/v1/runs/{OTHER}/expected"
    assert secured.put(path, json={"expected": "x"}, headers=_admin()).status_code == 404
    assert secured.delete(path, headers=_admin()).status_code == 404
    assert secured.get(path, headers=_admin()).json()["expected"] is None


def _verdict(run_id: str, time_ns: int) -> StoredClassification:
    return StoredClassification(run_id=run_id, classifier=DETECTORS, model="", prompt_sha256="", chain_hash="",
                                verified=True, verdict="ok", failure_modes=(), culprit_step=None,
                                culprit_span_id="", verdict_json="{}", time_ns=time_ns)


def test_a_run_whose_expected_outcome_changes_is_analysed_again_held_to_it(stored_run: Store) -> None:
    stored_run.verdicts.insert_classifications([_verdict(RUN, time.time_ns())])
    assert stored_run.verdicts.to_analyse(DETECTORS, limit=10) == []  # judged since its row changed
    stored_run.verdicts.set_expected_outcome(RUN, {"day": "Friday"})
    assert stored_run.verdicts.to_analyse(DETECTORS, limit=10) == [RUN]
    seen: list[object] = []

    def analyzer(spans, *, chain, judge, expected=None):  # type: ignore[no-untyped-def]
        seen.append(expected)
        return [_verdict(RUN, time.time_ns())]

    worker = AnalysisWorker(AnalysisConfig(batch=10), stored_run, analyzer=analyzer)
    assert worker.run_once() == 1 and seen == [{"day": "Friday"}]
    assert stored_run.verdicts.to_analyse(DETECTORS, limit=10) == []
    stored_run.verdicts.clear_expected_outcome(RUN)
    assert stored_run.verdicts.to_analyse(DETECTORS, limit=10) == [RUN]  # cleared: judged again, on its own

    def plain(spans, *, chain, judge):  # type: ignore[no-untyped-def]
        return [_verdict(RUN, time.time_ns())]

    assert AnalysisWorker(AnalysisConfig(batch=10), stored_run, analyzer=plain).run_once() == 1  # none is passed
