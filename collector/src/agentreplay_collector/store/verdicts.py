"""What is said of runs after they are judged: failure-analysis verdicts (classifications), expected
outcomes set after a run, each halted run's incident record, and multi-model replay's trials.

The analysis worker and the incident writer keep their backlogs here (:meth:`Verdicts.to_analyse`,
:meth:`Verdicts.incidents_due`). The methods the CLI also asks of a running collector (verdicts, trials,
expected outcomes) have the collector client's names, so either answers the CLI alike.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agentreplay_client.incidents import IncidentDue, IncidentState, StoredIncident
from agentreplay_client.models import (
    SCOPE_RUN,
    TRIAL_ERRORED,
    TRIAL_FAILED_OTHERWISE,
    TRIAL_FIXED,
    TRIAL_REPEATED,
    ChainState,
    ModelAccuracy,
    ModelTrial,
    StoredClassification,
    StoredExpected,
)
from agentreplay_collector.store import rows, schema
from agentreplay_collector.store.engine import Engine

_CLASSIFICATION_COLUMNS = (
    "RunId, Classifier, Model, PromptSha256, ChainHash, Verified, Verdict, FailureModes, CulpritStep,"
    " CulpritSpanId, VerdictJson, toUnixTimestamp64Nano(CreatedAt)"
)
_EXPECTED_COLUMNS = ("RunId", "Expected", "Cleared", "UpdatedAt")
_INCIDENT_INSERT_COLUMNS = ("RunId", "AgentId", "RunUpdatedAt", "State", "Bytes", "Detail", "UpdatedAt")
_INCIDENT_COLUMNS = (
    "RunId, AgentId, toUnixTimestamp64Nano(RunUpdatedAt), State, Bytes, Detail, toUnixTimestamp64Nano(UpdatedAt)"
)
_MODEL_TRIAL_COLUMNS = (
    "RunId, ForkRunId, AgentId, Task, TaskText, Step, Provider, Model, Outcome, FailureModes, Detail,"
    " toUnixTimestamp64Nano(CreatedAt)"
)


class Verdicts:
    """Classifications, expected outcomes, incidents and model trials: each kept (none replaces
    another but by being newer), read back newest first or latest per run."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    # --- failure analysis ----------------------------------------------------------------------
    def insert_classifications(self, records: Sequence[StoredClassification]) -> None:
        """Verdicts of the detectors and the LLM judges; each is kept (none replaces another)."""
        found = [rows.classification_row(c) for c in records]
        self.engine.insert(schema.CLASSIFICATIONS, rows.CLASSIFICATION_COLUMNS, found)

    def classifications(self, run_id: str) -> list[StoredClassification]:
        """Every verdict on a run, newest first."""
        sql = (
            f"SELECT {_CLASSIFICATION_COLUMNS} FROM {self.engine.database}.{schema.CLASSIFICATIONS}"
            " WHERE RunId = {run:String} ORDER BY CreatedAt DESC"
        )
        return [rows.classification_from_row(r) for r in self.engine.rows("classification list", sql, {"run": run_id})]

    def latest_classifications(self, run_ids: Sequence[str]) -> list[StoredClassification]:
        """Each judge's (classifier and model) latest verdict on each of these runs."""
        if not run_ids:
            return []
        sql = (
            f"SELECT {_CLASSIFICATION_COLUMNS} FROM {self.engine.database}.{schema.CLASSIFICATIONS}"
            " WHERE RunId IN {ids:Array(String)} ORDER BY CreatedAt DESC LIMIT 1 BY RunId, Classifier, Model"
        )
        found = self.engine.rows("classification list", sql, {"ids": list(run_ids)})
        return [rows.classification_from_row(r) for r in found]

    def to_analyse(self, classifier: str, *, limit: int) -> list[str]:
        """Runs whose chain verdict is in and that ``classifier`` has not judged since their row last
        changed, or since their expected outcome was last set or cleared, oldest first: the
        failure-analysis worker's backlog."""
        db = self.engine.database
        sql = (
            f"SELECT r.RunId FROM (SELECT RunId, Start, UpdatedAt FROM {db}.{schema.RUNS} FINAL"
            " WHERE ChainStatus != {pending:String}) AS r"
            f" LEFT JOIN (SELECT RunId, max(CreatedAt) AS Judged FROM {db}.{schema.CLASSIFICATIONS}"
            " WHERE Classifier = {classifier:String} GROUP BY RunId) AS c ON c.RunId = r.RunId"
            f" LEFT JOIN (SELECT RunId, max(UpdatedAt) AS Given FROM {db}.{schema.RUN_EXPECTED} GROUP BY RunId)"
            " AS e ON e.RunId = r.RunId"
            " WHERE c.Judged < greatest(r.UpdatedAt, e.Given) ORDER BY r.Start, r.RunId LIMIT {limit:UInt32}"
        )
        params = {"pending": str(ChainState.PENDING), "classifier": classifier, "limit": int(limit)}
        return [r[0] for r in self.engine.rows("analysis backlog", sql, params)]

    # --- expected outcomes: what a run should produce, set after it (agentreplay expect) -------------
    def insert_expected(self, record: StoredExpected) -> None:
        """An expected outcome set for a run (``record.expected`` None: cleared); the latest row counts."""
        text = "" if record.cleared else json.dumps(record.expected, ensure_ascii=False, separators=(",", ":"))
        self.engine.insert(schema.RUN_EXPECTED, _EXPECTED_COLUMNS,
                           [[record.run_id, text, int(record.cleared), rows.dt(record.time_ns)]])

    def expected_outcome(self, run_id: str) -> StoredExpected | None:
        """The expected outcome set for the run (its latest setting), None when none is set or the latest
        cleared it. A row whose JSON does not parse (written by hand) counts as none."""
        sql = (
            "SELECT Expected, Cleared, toUnixTimestamp64Nano(UpdatedAt)"
            f" FROM {self.engine.database}.{schema.RUN_EXPECTED}"
            " WHERE RunId = {run:String} ORDER BY UpdatedAt DESC LIMIT 1"
        )
        found = self.engine.rows("expected outcome read", sql, {"run": run_id})
        if not found or found[0][1]:
            return None
        try:
            value = json.loads(found[0][0])
        except ValueError:
            return None
        return None if value is None else StoredExpected(run_id=run_id, expected=value, time_ns=int(found[0][2]))

    def set_expected_outcome(self, run_id: str, expected: Any) -> StoredExpected:
        """Set what the run should produce (any JSON value but null); the same method as the collector client's."""
        record = StoredExpected(run_id=run_id, expected=expected)
        self.insert_expected(record)
        return record

    def clear_expected_outcome(self, run_id: str) -> bool:
        """Clear the run's expected outcome; whether one was set."""
        was = self.expected_outcome(run_id) is not None
        self.insert_expected(StoredExpected(run_id=run_id, expected=None))
        return was

    # --- the incident writer: each halted run's incident folder ----------------------------------
    def insert_incidents(self, records: Sequence[StoredIncident]) -> None:
        """Incident records; a run's latest (by when it was recorded) replaces the others."""
        found = [[i.run_id, i.agent_id, rows.dt(i.run_updated_ns), str(i.state), int(i.bytes), i.detail,
                  rows.dt(i.time_ns)] for i in records]
        self.engine.insert(schema.INCIDENTS, _INCIDENT_INSERT_COLUMNS, found)

    def incidents(self, state: IncidentState | None = None) -> list[StoredIncident]:
        """Each run's latest incident record (in ``state``, if given), oldest first."""
        sql = (
            f"SELECT {_INCIDENT_COLUMNS} FROM {self.engine.database}.{schema.INCIDENTS} FINAL"
            " WHERE {state:String} = '' OR State = {state:String} ORDER BY UpdatedAt, RunId"
        )
        found = self.engine.rows("incident list", sql, {"state": str(state or "")})
        return [StoredIncident(run_id=r[0], agent_id=r[1], run_updated_ns=int(r[2]), state=IncidentState(r[3]),
                               bytes=int(r[4]), detail=r[5], time_ns=int(r[6])) for r in found]

    def incidents_due(self, classifier: str, *, limit: int) -> list[IncidentDue]:
        """Halted runs (by their own row or an active halt of the run) that ``classifier`` has judged since
        their row last changed and whose incident has no record as new as that row, oldest first: the
        incident writer's backlog. The verdict alone never makes a run's incident done."""
        db = self.engine.database
        sql = (
            "SELECT r.RunId, r.AgentId, toUnixTimestamp64Nano(r.UpdatedAt) FROM"
            f" (SELECT RunId, AgentId, Start, UpdatedAt FROM {db}.{schema.RUNS} FINAL"
            " WHERE ChainStatus != {pending:String} AND (Halted != 0 OR RunId IN"
            f" (SELECT TargetId FROM {db}.{schema.HALTS} FINAL WHERE Scope = {{run_scope:String}} AND Active = 1))"
            ") AS r"
            f" INNER JOIN (SELECT RunId, max(CreatedAt) AS Judged FROM {db}.{schema.CLASSIFICATIONS}"
            " WHERE Classifier = {classifier:String} GROUP BY RunId) AS c ON c.RunId = r.RunId"
            f" LEFT JOIN (SELECT RunId, RunUpdatedAt FROM {db}.{schema.INCIDENTS} FINAL) AS i ON i.RunId = r.RunId"
            " WHERE c.Judged >= r.UpdatedAt AND i.RunUpdatedAt < r.UpdatedAt"
            " ORDER BY r.Start, r.RunId LIMIT {limit:UInt32}"
        )
        params = {"pending": str(ChainState.PENDING), "run_scope": SCOPE_RUN, "classifier": classifier,
                  "limit": int(limit)}
        return [IncidentDue(run_id=r[0], agent_id=r[1], run_updated_ns=int(r[2]))
                for r in self.engine.rows("incident backlog", sql, params)]

    # --- multi-model replay: each model tried at a failed run's culprit step ---------------------
    def insert_model_trials(self, trials: Sequence[ModelTrial]) -> None:
        """Trials of ``agentreplay models``; each is kept, so accuracy accumulates run after run."""
        self.engine.insert(schema.MODEL_TRIALS, rows.MODEL_TRIAL_COLUMNS, [rows.model_trial_row(t) for t in trials])

    def model_trials(self, run_id: str) -> list[ModelTrial]:
        """Every trial on one run, newest first."""
        sql = (
            f"SELECT {_MODEL_TRIAL_COLUMNS} FROM {self.engine.database}.{schema.MODEL_TRIALS}"
            " WHERE RunId = {run:String} ORDER BY CreatedAt DESC"
        )
        return [rows.model_trial_from_row(r) for r in self.engine.rows("model trial list", sql, {"run": run_id})]

    def model_accuracy(self, *, agent: str | None = None) -> list[ModelAccuracy]:
        """Per task and model: trials, and how many fixed, repeated, failed otherwise or errored."""
        sql = (
            "SELECT Task, any(TaskText), any(AgentId), Provider, Model, count(), countIf(Outcome = {fixed:String}),"
            " countIf(Outcome = {repeated:String}), countIf(Outcome = {other:String}),"
            " countIf(Outcome = {errored:String}),"
            f" toUnixTimestamp64Nano(max(CreatedAt)) FROM {self.engine.database}.{schema.MODEL_TRIALS}"
            " WHERE {agent:String} = '' OR AgentId = {agent:String}"
            " GROUP BY Task, Provider, Model ORDER BY Task, Provider, Model"
        )
        params = {"agent": agent or "", "fixed": TRIAL_FIXED, "repeated": TRIAL_REPEATED,
                  "other": TRIAL_FAILED_OTHERWISE, "errored": TRIAL_ERRORED}
        return [ModelAccuracy(task=r[0], task_text=r[1], agent_id=r[2], provider=r[3], model=r[4], trials=int(r[5]),
                              fixed=int(r[6]), repeated=int(r[7]), failed_otherwise=int(r[8]), errored=int(r[9]),
                              last_ns=int(r[10])) for r in self.engine.rows("model accuracy", sql, params)]
