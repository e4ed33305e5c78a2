"""The control plane's tables: manifests, policy decisions, halts, alerts, trust scores, replay grants,
and what the scope processor and the trust book read back (an agent's track record, recent spend, who
opened each run).

Two business rules live in SQL here, named where they are kept: which runs count toward an agent's
trust record (:data:`TRACK_RECORD_STATES`, :data:`LIVE_BEFORE`, :data:`LIVE_AFTER`,
:func:`counted_runs`) and which spans count as spend (:func:`spend_counts`, :func:`is_tool_span`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from agentreplay_client.models import (
    RULE_REPLAY_VERIFIED,
    TOOL_ATTRIBUTES,
    TOOL_SPAN_PREFIX,
    Alert,
    AlertState,
    ChainState,
    DecisionRecord,
    GrantEvent,
    Halt,
    SpendTotals,
    StoredManifest,
    TrackRecord,
    TrustScore,
)
from agentreplay_collector.store import rows, schema
from agentreplay_collector.store.engine import Engine
from agentreplay_otel.core import DENY, semconv

# --- which runs count toward an agent's trust record -------------------------------------------------
TRACK_RECORD_STATES = (ChainState.INTACT, ChainState.UNSEALED)
"""The chain verdicts of runs that count toward a track record: verified (intact, or unsealed: every
span checks but the run was not sealed). Broken, pending and unchained runs never count."""

LIVE_BEFORE = "toIntervalDay(1)"
LIVE_AFTER = "toIntervalMinute(10)"
"""A run was received live if it started at most :data:`LIVE_BEFORE` (a day) before the collector first
heard of it, and neither started nor ended more than :data:`LIVE_AFTER` (ten minutes: clock skew)
after the collector's clock (its arrival, and its row's last update). A run dated elsewhere was
made up or replayed from elsewhere: it says nothing of how the agent behaves now."""


def counted_runs(database: str) -> str:
    """The runs of agent ``{a:String}`` that may count toward its track record, with when each
    arrived (``RunId, StatusCode, RunKind, ReplayOf, Received``): received live (:data:`LIVE_BEFORE`,
    :data:`LIVE_AFTER`) and verified (``{verified:Array(String)}``, :data:`TRACK_RECORD_STATES`).
    :meth:`Control.track_record` then keeps a regression replay only if it replays one of these
    recorded runs, and leaves out a replay or fork the collector verified as one."""
    return (
        "SELECT r.RunId AS RunId, r.StatusCode AS StatusCode, r.RunKind AS RunKind, r.ReplayOf AS ReplayOf,"
        f" a.Received AS Received FROM {database}.{schema.RUNS} AS r FINAL"
        f" INNER JOIN (SELECT RunId, min(ReceivedAt) AS Received FROM {database}.{schema.RUN_ARRIVALS}"
        "   WHERE AgentId = {a:String} GROUP BY RunId) AS a ON a.RunId = r.RunId"
        " WHERE r.AgentId = {a:String} AND r.ChainStatus IN {verified:Array(String)}"
        f" AND r.Start >= a.Received - {LIVE_BEFORE} AND r.Start <= a.Received + {LIVE_AFTER}"
        f" AND r.End <= r.UpdatedAt + {LIVE_AFTER}"
    )


# --- which spans count as spend ------------------------------------------------------------------------
def _attr(key: str) -> str:
    return f"SpanAttributes['{key}']"


def is_tool_span() -> str:
    """A span is a tool call by any of its tool attributes, as
    :func:`~agentreplay_client.models.tool_of` says: the ``execute_tool`` operation, a ``tool.`` span
    name, or any attribute of :data:`~agentreplay_client.models.TOOL_ATTRIBUTES`. Every tool span is a
    call, whatever decision it carries."""
    tool_keys = ", ".join(f"'{k}'" for k in TOOL_ATTRIBUTES)
    return (
        f"({_attr(semconv.GEN_AI_OPERATION_NAME)} = '{semconv.OP_EXECUTE_TOOL}'"
        f" OR startsWith(SpanName, '{TOOL_SPAN_PREFIX}')"
        f" OR hasAny(mapKeys(SpanAttributes), [{tool_keys}]))"
    )


def spend_counts(database: str) -> str:
    """The spans whose cost counts as the agent's spend, each once: those of the runs received in the
    last ``{days:UInt32}`` days (or dated in them), but for a verified replay's replayed spans
    (``agentreplay.replay.source``, in a run with a ``replay.verified`` decision), which spent nothing
    of the agent's (the scope processor leaves them out too)."""
    return (
        f"SELECT * FROM {database}.{schema.TRACES}"
        " WHERE (Timestamp >= now() - toIntervalDay({days:UInt32})"
        f"   OR TraceId IN (SELECT RunId FROM ({_recent_arrivals(database)})))"
        f"   AND NOT ({_attr(semconv.REPLAY_SOURCE)} != '' AND TraceId IN (SELECT RunId FROM"
        f" {database}.{schema.DECISIONS} WHERE Rule = {{replay_verified:String}}))"
        f" LIMIT 1 BY {schema.SPAN_DEDUPE_KEY}"
    )


def _recent_arrivals(database: str) -> str:
    return (
        f"SELECT RunId, min(ReceivedAt) AS Received FROM {database}.{schema.RUN_ARRIVALS}"
        " GROUP BY RunId HAVING Received >= now64(9) - toIntervalDay({days:UInt32})"
    )


def _non_negative(value: str) -> str:
    """A cost that is not a finite amount >= 0 counts 0."""
    return f"if(isFinite({value}) AND {value} >= 0, {value}, 0)"


class Control:
    """Control-plane rows (written by the control writer and the trust book) and the reads that
    rebuild the scope processor's state at start."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @property
    def exclusive(self) -> bool:
        """Whether this process is the store's only writer (an embedded chDB directory)."""
        return self.engine.exclusive

    def check(self) -> None:
        """Reach the store now (this thread's connection opened); :class:`StoreUnavailable` if it does not answer."""
        self.engine.check()

    # --- writes -----------------------------------------------------------------------------
    def insert_decisions(self, decisions: Sequence[DecisionRecord]) -> None:
        self.engine.insert(schema.DECISIONS, rows.DECISION_COLUMNS, [rows.decision_row(d) for d in decisions])

    def insert_halts(self, halts: Sequence[Halt]) -> None:
        """Halts and their ends (``active=False``); readers keep each target's latest."""
        self.engine.insert(schema.HALTS, rows.HALT_COLUMNS, [rows.halt_row(h) for h in halts])

    def insert_alerts(self, alerts: Sequence[AlertState]) -> None:
        self.engine.insert(schema.ALERTS, rows.ALERT_COLUMNS, [rows.alert_row(a) for a in alerts])

    def insert_manifests(self, manifests: Sequence[StoredManifest]) -> None:
        self.engine.insert(schema.MANIFESTS, rows.MANIFEST_COLUMNS, [rows.manifest_row(m) for m in manifests])

    def insert_grant_events(self, events: Sequence[GrantEvent]) -> None:
        self.engine.insert(schema.REPLAY_GRANTS, rows.GRANT_COLUMNS, [rows.grant_row(g) for g in events])

    def insert_trust_scores(self, scores: Sequence[TrustScore]) -> None:
        self.engine.insert(schema.TRUST_SCORES, rows.TRUST_COLUMNS, [rows.trust_row(t) for t in scores])

    # --- reads --------------------------------------------------------------------------------
    def grant_user(self, grant_id: str) -> str | None:
        """The replay run that used the grant (the first to present it), None if none has."""
        sql = (
            f"SELECT ReplayRunId FROM {self.engine.database}.{schema.REPLAY_GRANTS}"
            " WHERE GrantId = {grant:String} AND Event = 'used' ORDER BY Timestamp LIMIT 1"
        )
        found = self.engine.rows("replay grant read", sql, {"grant": grant_id})
        return str(found[0][0]) if found else None

    def track_record(self, agent_id: str, *, window: int, not_violations: Iterable[str]) -> TrackRecord:
        """The agent's last ``window`` runs by the collector's clock that count (:func:`counted_runs`),
        and, for a regression replay, replaying a counted recorded run of the same agent; a replay or
        fork the collector verified as one (``replay.verified``) is not the agent's run and is left
        out. Of those: failed, regression replays (and passed), and runs with a denial that counts as
        a violation (any rule but ``not_violations``, on a call that was not replayed)."""
        db = self.engine.database
        counted = counted_runs(db)
        sql = (
            f"WITH (SELECT groupArray(RunId) FROM ({counted}) WHERE RunKind = {{record:String}}) AS recorded,"
            f" (SELECT groupUniqArray(RunId) FROM {db}.{schema.DECISIONS} WHERE AgentId = {{a:String}}"
            "   AND Decision = {deny:String} AND Rule NOT IN {skip:Array(String)} AND Replayed = 0) AS violating,"
            f" (SELECT groupUniqArray(RunId) FROM {db}.{schema.DECISIONS} WHERE AgentId = {{a:String}}"
            "   AND Rule = {replay_verified:String}) AS replays"
            " SELECT count(), countIf(StatusCode = 'Error'), countIf(RunKind = {regression:String}),"
            " countIf(RunKind = {regression:String} AND StatusCode != 'Error'), countIf(has(violating, RunId))"
            f" FROM (SELECT RunId, StatusCode, RunKind FROM ({counted})"
            "  WHERE (RunKind != {regression:String} OR has(recorded, ReplayOf))"
            "   AND NOT (RunKind != {regression:String} AND has(replays, RunId))"
            "  ORDER BY Received DESC LIMIT {window:UInt32})"
        )
        params = {
            "a": agent_id,
            "skip": sorted(not_violations),
            "deny": DENY,
            "regression": semconv.RUN_KIND_REGRESSION,
            "record": semconv.RUN_KIND_RECORD,
            "replay_verified": RULE_REPLAY_VERIFIED,
            "verified": [str(state) for state in TRACK_RECORD_STATES],
            "window": int(window),
        }
        runs, failures, regressions, passes, violating = (
            int(v) for v in self.engine.rows("track record", sql, params)[0]
        )
        return TrackRecord(
            runs=runs, failures=failures, regressions=regressions, regression_passes=passes,
            violating_runs=violating,
        )

    def agents(self) -> list[str]:
        """Every agent with a stored run, sorted."""
        sql = f"SELECT DISTINCT AgentId FROM {self.engine.database}.{schema.RUNS} ORDER BY 1"
        return [r[0] for r in self.engine.rows("agent list", sql) if r[0]]

    def recent_spend(self, *, days: int = 2) -> list[SpendTotals]:
        """Spend and tool calls per agent, run, UTC day, operation and tool, of the spans that count
        (:func:`spend_counts`). The day is the one the collector received the run on (the span's own
        time only for a run with no arrival row); a cost that is not a finite amount >= 0 counts 0; a
        tool span (:func:`is_tool_span`) counts as a call of its tool."""
        db = self.engine.database
        is_tool = is_tool_span()
        name = _attr(semconv.GEN_AI_TOOL_NAME)
        tool = (
            f"if({name} != '', {name},"
            f" if(startsWith(SpanName, '{TOOL_SPAN_PREFIX}'), substring(SpanName, {len(TOOL_SPAN_PREFIX) + 1}), ''))"
        )
        cost = f"toFloat64OrZero({_attr(semconv.COST_USD)})"
        code = _attr(semconv.COST_CURRENCY)
        currency = f"if({code} IN ('', '{semconv.CURRENCY_USD}'), '', {code})"
        amount = f"toFloat64OrZero({_attr(semconv.COST_AMOUNT)})"
        sql = (
            f"SELECT t.ResourceAttributes['{semconv.AGENT_ID}'], t.TraceId,"
            " toString(toDate(if(a.RunId = '', least(t.Timestamp, now64(9)), a.Received), 'UTC')),"
            f" if({is_tool}, '{semconv.OP_EXECUTE_TOOL}', {_attr(semconv.GEN_AI_OPERATION_NAME)}),"
            f" if({is_tool}, {tool}, ''),"
            f" sum({_non_negative(cost)}), count(), {currency},"
            f" sum(if({currency} != '' AND isFinite({amount}) AND {amount} >= 0, {amount}, 0))"
            f" FROM ({spend_counts(db)}) AS t"
            f" LEFT JOIN ({_recent_arrivals(db)}) AS a ON a.RunId = t.TraceId"
            " GROUP BY 1, 2, 3, 4, 5, 8"
        )
        params = {"days": int(days), "replay_verified": RULE_REPLAY_VERIFIED}
        return [
            SpendTotals(agent_id=agent, run_id=run_id, day=day, operation=operation, tool=tool,
                        cost_usd=float(cost), calls=int(calls), currency=str(code), amount=float(charged))
            for agent, run_id, day, operation, tool, cost, calls, code, charged
            in self.engine.rows("spend", sql, params)
        ]

    def owners(self, run_ids: Sequence[str]) -> dict[str, str]:
        """The agent that opened each of these runs (its earliest arrival; for a run stored before
        arrivals were kept, the agent its row names). Runs the store has never seen are left out."""
        db = self.engine.database
        sql = (
            "SELECT RunId, argMin(AgentId, At) FROM ("
            f" SELECT RunId, AgentId, ReceivedAt AS At FROM {db}.{schema.RUN_ARRIVALS}"
            "  WHERE RunId IN {ids:Array(String)}"
            f" UNION ALL SELECT RunId, AgentId, toDateTime64('2200-01-01 00:00:00', 9) AS At FROM {db}.{schema.RUNS}"
            "  WHERE RunId IN {ids:Array(String)} AND AgentId != ''"
            ") GROUP BY RunId"
        )
        return {run_id: agent for run_id, agent in self.engine.rows("run owners", sql, {"ids": list(run_ids)})}

    def count_owned(self) -> int:
        """How many run ids :meth:`owners` can answer for (with repeats: an upper bound)."""
        db = self.engine.database
        sql = (
            f"SELECT (SELECT count() FROM {db}.{schema.RUN_ARRIVALS})"
            f" + (SELECT count() FROM {db}.{schema.RUNS} WHERE AgentId != '')"
        )
        return int(self.engine.rows("run count", sql)[0][0])

    def owned_filter(self, bits: int, hashes: int) -> bytes:
        """A Bloom filter of ``bits`` bits over every run id :meth:`owners` can answer for, built
        by the store: bit ``(h1 + i * h2) % bits`` for ``i < hashes``, ``h1`` and ``h2`` the first two
        little-endian 32-bit words of the id's MD5 (:func:`.ownership.filter_positions` in Python).
        Byte ``b`` holds bits ``8b`` to ``8b + 7``, lowest first."""
        db = self.engine.database
        ids = (
            f"SELECT RunId FROM {db}.{schema.RUN_ARRIVALS}"
            f" UNION DISTINCT SELECT RunId FROM {db}.{schema.RUNS} WHERE AgentId != ''"
        )
        words = (
            "SELECT reinterpretAsUInt32(substring(MD5(RunId), 1, 4)) AS h1,"
            f" reinterpretAsUInt32(substring(MD5(RunId), 5, 4)) AS h2 FROM ({ids})"
        )
        positions = (
            "SELECT (toUInt64(h1) + toUInt64(i) * h2) % {bits:UInt64} AS p"
            f" FROM ({words}) ARRAY JOIN range({{hashes:UInt8}}) AS i"
        )
        sql = (
            "SELECT toUInt64(intDiv(p, 8)) AS b, toUInt8(groupBitOr(bitShiftLeft(toUInt8(1), toUInt8(p % 8)))) AS v"
            f" FROM ({positions}) GROUP BY b ORDER BY b WITH FILL FROM 0 TO {{bytes:UInt64}}"
        )
        table = self.engine.call(
            "run filter", "query_arrow", sql,
            parameters={"bits": int(bits), "hashes": int(hashes), "bytes": -(-int(bits) // 8)},
        )
        return b"".join(bytes(chunk.buffers()[1])[chunk.offset : chunk.offset + len(chunk)]
                        for chunk in table.column("v").chunks)

    def manifests(self) -> list[StoredManifest]:
        sql = (
            "SELECT Sha256, Signed, toUnixTimestamp64Nano(UpdatedAt)"
            f" FROM {self.engine.database}.{schema.MANIFESTS} FINAL"
        )
        return [StoredManifest(sha256=d, signed=signed, time_ns=int(t))
                for d, signed, t in self.engine.rows("manifest list", sql)]

    def active_halts(self) -> list[Halt]:
        sql = (
            "SELECT Scope, TargetId, Reason, Actor, toUnixTimestamp64Nano(UpdatedAt)"
            f" FROM {self.engine.database}.{schema.HALTS} FINAL WHERE Active = 1"
        )
        return [
            Halt(scope=scope, target=target, reason=reason, actor=actor, time_ns=int(t))
            for scope, target, reason, actor, t in self.engine.rows("halt list", sql)
        ]

    def decisions(self, run_id: str) -> list[tuple[str, DecisionRecord]]:
        """A run's policy decisions in time order, each with the store's text of its time."""
        sql = (
            "SELECT toString(Timestamp), toUnixTimestamp64Nano(Timestamp), RunId, SpanId, AgentId, Tool,"
            f" Decision, Rule, ManifestSha256, Detail, Replayed FROM {self.engine.database}.{schema.DECISIONS}"
            " WHERE RunId = {run:String} ORDER BY Timestamp"
        )
        return [(r[0], rows.decision_from_row(r[1:])) for r in self.engine.rows("decision list", sql, {"run": run_id})]

    def alerts(self, limit: int) -> list[tuple[str, AlertState]]:
        """Alerts newest first, each once (delivered if any delivery was stored), with the store's
        text of the time it was raised."""
        sql = (
            "SELECT toString(min(Timestamp)), toUnixTimestamp64Nano(min(Timestamp)), AlertId, any(Severity),"
            " any(Kind), any(AgentId), any(RunId), any(Message), any(Attributes), max(Delivered)"
            f" FROM {self.engine.database}.{schema.ALERTS} GROUP BY AlertId"
            " ORDER BY min(Timestamp) DESC LIMIT {limit:UInt32}"
        )
        return [
            (
                text,
                AlertState(
                    alert=Alert(alert_id=alert_id, severity=severity, kind=kind, agent_id=agent, run_id=run,
                                message=message, attributes=dict(attributes), time_ns=int(t)),
                    delivered=bool(delivered),
                ),
            )
            for text, t, alert_id, severity, kind, agent, run, message, attributes, delivered
            in self.engine.rows("alert list", sql, {"limit": int(limit)})
        ]
