"""Attack (issue 31, item 8): an incident folder that links outside it.

Whoever can write under the collector's incidents folder (the incident writer's own bugs, a restored
backup, another process of the same user) puts a symbolic link there: a run's folder that is a link to
``/etc``, a ``tests/`` that is a link to another folder, a file that is a link to a key. The listing
(``GET /v1/runs/ID/incident``) named what was behind a linked folder, with sizes; now neither the listing
nor the file route follows a link, folder or file: what is behind one is not listed and not served.

The routes are the collector's own (:func:`readapi.incident_routes`), read as the operator, over a
store stand-in that says which runs have a written incident.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from agentreplay_client.incidents import IncidentState, StoredIncident
from agentreplay_collector.ownership import RunOwners
from agentreplay_collector.readapi import incident_routes

pytestmark = pytest.mark.skipif(os.name != "posix", reason="symbolic links and O_NOFOLLOW are POSIX's")
LINKED_RUN = "a" * 32  # its folder is a link to a folder outside
MIXED_RUN = "b" * 32  # a real folder holding links among its files
SECRET = "outside the incidents folder: not an incident's"


class WrittenIncidents:
    """The store as the incident routes ask it: which runs have a written incident (``store.verdicts``)."""

    def __init__(self) -> None:
        self.verdicts = self

    def incidents(self, state: IncidentState | None = None) -> list[StoredIncident]:
        return [StoredIncident(run_id=run, agent_id="a", run_updated_ns=1, state=IncidentState.WRITTEN, bytes=1,
                               detail="", time_ns=1) for run in (LINKED_RUN, MIXED_RUN)]


@pytest.fixture
def served(tmp_path: Path) -> TestClient:
    outside = tmp_path / "outside"
    (outside / "tests").mkdir(parents=True)
    for name in ("walkthrough.html", "claim.json", "secret.json"):
        (outside / name).write_text(SECRET)
    (outside / "tests" / "test_leak.py").write_text(SECRET)
    incidents = tmp_path / "incidents"
    incidents.mkdir()
    (incidents / LINKED_RUN).symlink_to(outside, target_is_directory=True)
    mixed = incidents / MIXED_RUN
    (mixed / "tests").mkdir(parents=True)
    (mixed / "claim.json").write_text('{"claim": true}')
    (mixed / "tests" / "test_own.py").write_text("def test_own(): pass\n")
    (mixed / "walkthrough.html").symlink_to(outside / "walkthrough.html")
    (mixed / "tests" / "test_linked.py").symlink_to(outside / "tests" / "test_leak.py")
    (mixed / "root-cause.json").symlink_to(outside / "secret.json")
    os.mkfifo(mixed / "dispute.json")  # not a regular file: never opened for reading (it would block)
    app = Starlette(routes=incident_routes(WrittenIncidents(), incidents, owners=RunOwners(None)))  # type: ignore[arg-type]
    return TestClient(app)


def test_a_run_folder_that_is_a_link_is_no_incident(served: TestClient) -> None:
    listed = served.get(f"/v1/runs/{LINKED_RUN}/incident")
    assert listed.status_code == 404 and SECRET not in listed.text, listed.text
    for name in ("walkthrough.html", "claim.json", "tests/test_leak.py"):
        answer = served.get(f"/v1/runs/{LINKED_RUN}/incident/{name}")
        assert answer.status_code == 404 and SECRET not in answer.text, (name, answer.text)


def test_links_inside_a_run_folder_are_neither_listed_nor_served(served: TestClient) -> None:
    listed = served.get(f"/v1/runs/{MIXED_RUN}/incident")
    assert listed.status_code == 200, listed.text
    assert listed.json()["files"] == [
        {"name": "claim.json", "bytes": 15, "content_type": "application/json"},
        {"name": "tests/test_own.py", "bytes": 21, "content_type": "text/plain; charset=utf-8"},
    ]
    assert served.get(f"/v1/runs/{MIXED_RUN}/incident/claim.json").json() == {"claim": True}
    assert served.get(f"/v1/runs/{MIXED_RUN}/incident/tests/test_own.py").status_code == 200
    for name in ("walkthrough.html", "root-cause.json", "tests/test_linked.py", "dispute.json"):
        answer = served.get(f"/v1/runs/{MIXED_RUN}/incident/{name}")
        assert answer.status_code == 404 and SECRET not in answer.text, (name, answer.text)


def test_a_tests_folder_that_is_a_link_is_not_followed(served: TestClient, tmp_path: Path) -> None:
    tests = tmp_path / "incidents" / MIXED_RUN / "tests"
    for child in tests.iterdir():
        child.unlink()
    tests.rmdir()
    tests.symlink_to(tmp_path / "outside" / "tests", target_is_directory=True)
    listed = served.get(f"/v1/runs/{MIXED_RUN}/incident")
    assert [f["name"] for f in listed.json()["files"]] == ["claim.json"], listed.text
    answer = served.get(f"/v1/runs/{MIXED_RUN}/incident/tests/test_leak.py")
    assert answer.status_code == 404 and SECRET not in answer.text
