"""Trust scores: how much an agent may spend follows from its own track record.

From the agent's last ``WINDOW`` runs in the store:

    failure_rate          runs whose run span ended in error / runs
    regression_pass_rate  regression replays that passed / regression replays (none: left out)
    violation_rate        runs with a scope violation / runs

    raw   = (0.5 (1 - failure_rate) + 0.3 regression_pass_rate + 0.2 (1 - violation_rate)) / weights used
    score = (PRIOR_WEIGHT * PRIOR + n * raw) / (PRIOR_WEIGHT + n)

The prior (0.5, worth ``PRIOR_WEIGHT`` = 10 runs) smooths the score: a new agent starts in
the middle, and one run moves it by at most 1/11. ``policies/trust_tiers.json`` maps the
score to a tier and a spend multiplier that Authorize and the scope processor apply to a
manifest's caps.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from agentreplay_client.errors import StoreError
from agentreplay_client.models import NOT_VIOLATIONS, TrackRecord, TrustScore
from agentreplay_collector.store.control import Control

_log = logging.getLogger(__name__)

WINDOW = 50
PRIOR = 0.5
PRIOR_WEIGHT = 10.0
W_FAILURE, W_REGRESSION, W_VIOLATION = 0.5, 0.3, 0.2


@dataclass(frozen=True, kw_only=True)
class Tier:
    name: str
    min_score: float
    spend_multiplier: float


DEFAULT_TIERS = (
    Tier(name="exemplary", min_score=0.85, spend_multiplier=2.0),
    Tier(name="trusted", min_score=0.65, spend_multiplier=1.5),
    Tier(name="standard", min_score=0.4, spend_multiplier=1.0),
    Tier(name="probation", min_score=0.2, spend_multiplier=0.5),
    Tier(name="restricted", min_score=0.0, spend_multiplier=0.1),
)


def load_tiers(path: Path | None) -> tuple[Tier, ...]:
    if path is None:
        return DEFAULT_TIERS
    doc = json.loads(path.read_text())
    tiers = tuple(
        Tier(
            name=str(t["name"]),
            min_score=float(t["min_score"]),
            spend_multiplier=float(t["spend_multiplier"]),
        )
        for t in doc["tiers"]
    )
    return tuple(sorted(tiers, key=lambda t: -t.min_score))


def score(
    *, runs: int, failures: int, regressions: int, regression_passes: int, violating_runs: int
) -> float:
    """The formula in the module docstring (pure, for tests and the docs)."""
    if runs == 0:
        return PRIOR
    parts = [(W_FAILURE, 1 - failures / runs), (W_VIOLATION, 1 - min(1.0, violating_runs / runs))]
    if regressions:
        parts.append((W_REGRESSION, regression_passes / regressions))
    raw = sum(w * v for w, v in parts) / sum(w for w, _ in parts)
    return (PRIOR_WEIGHT * PRIOR + runs * raw) / (PRIOR_WEIGHT + runs)


def tier_for(value: float, tiers: Sequence[Tier]) -> Tier:
    return next((t for t in tiers if value >= t.min_score), tiers[-1])


class TrustBook:
    """Scores per agent, computed from the store and kept for ``refresh_s``."""

    def __init__(
        self, control: Control | None, *, tiers: Sequence[Tier] = DEFAULT_TIERS, refresh_s: float = 60.0
    ) -> None:
        self.control = control  # the store's control-plane tables (Store.control); None: no store
        self.tiers = tuple(tiers)
        self.refresh_s = refresh_s
        self._cache: dict[str, TrustScore] = {}
        self._lock = threading.Lock()
        self._refreshing: set[str] = set()
        self._prefetching: dict[str, concurrent.futures.Future[float]] = {}
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentreplay-trust")

    def multiplier(self, agent_id: str) -> float:
        """The agent's spend multiplier. Past ``refresh_s`` the last score still answers while a new
        one is computed on a thread of its own: callers on the event loop never wait for the store,
        except for an agent's first score (see :meth:`known`)."""
        cached = self._cache.get(agent_id)
        if cached is None:
            return self._compute_or_prior(agent_id)
        if time.time_ns() - cached.computed_ns >= self.refresh_s * 1e9:
            self._refresh_later(agent_id)
        return cached.spend_multiplier

    def known(self, agent_id: str) -> bool:
        """Whether the agent has a score already (else :meth:`multiplier` reads the store)."""
        return agent_id in self._cache

    def prefetch(self, agent_id: str) -> concurrent.futures.Future[float]:
        """The agent's multiplier, computed on the book's own thread (for callers on the event loop);
        one computation per agent at a time, however many ask."""
        with self._lock:
            pending = self._prefetching.get(agent_id)
            if pending is None:
                pending = self._prefetching[agent_id] = self._pool.submit(self._first_score, agent_id)
        return pending

    def _first_score(self, agent_id: str) -> float:
        try:
            if agent_id in self._cache:
                return self._cache[agent_id].spend_multiplier
            return self._compute_or_prior(agent_id, store_it=False)
        finally:
            with self._lock:
                self._prefetching.pop(agent_id, None)

    def warm(self) -> None:
        """Open the book's thread's store connection now, not on an agent's first Authorize."""
        if self.control is not None:
            self._pool.submit(self.control.check).result()

    def _compute_or_prior(self, agent_id: str, *, store_it: bool = True) -> float:
        try:
            result = self.compute(agent_id, store_it=store_it)
            if not store_it:  # written after the caller has its answer
                self._pool.submit(self._store, result)
            return result.spend_multiplier
        except StoreError as exc:
            _log.warning("trust score of %s not computed: %s", agent_id, exc)
            cached = self._cache.get(agent_id)
            return cached.spend_multiplier if cached else tier_for(PRIOR, self.tiers).spend_multiplier

    def _refresh_later(self, agent_id: str) -> None:
        with self._lock:
            if agent_id in self._refreshing:
                return
            self._refreshing.add(agent_id)
        self._pool.submit(self._refresh, agent_id)

    def _refresh(self, agent_id: str) -> None:
        try:
            self.compute(agent_id)
        except StoreError as exc:
            _log.warning("trust score of %s not refreshed: %s", agent_id, exc)
        finally:
            with self._lock:
                self._refreshing.discard(agent_id)

    def compute(self, agent_id: str, *, store_it: bool = True) -> TrustScore:
        record = TrackRecord(runs=0, failures=0, regressions=0, regression_passes=0, violating_runs=0)
        if self.control is not None:
            record = self.control.track_record(agent_id, window=WINDOW, not_violations=NOT_VIOLATIONS)
        value = score(
            runs=record.runs,
            failures=record.failures,
            regressions=record.regressions,
            regression_passes=record.regression_passes,
            violating_runs=record.violating_runs,
        )
        tier = tier_for(value, self.tiers)
        runs, regressions = record.runs, record.regressions
        result = TrustScore(
            agent_id=agent_id,
            score=round(value, 6),
            tier=tier.name,
            spend_multiplier=tier.spend_multiplier,
            runs=runs,
            failure_rate=record.failures / runs if runs else 0.0,
            regression_pass_rate=record.regression_passes / regressions if regressions else 1.0,
            regressions=regressions,
            scope_violations=record.violating_runs,
            computed_ns=time.time_ns(),
        )
        with self._lock:
            self._cache[agent_id] = result
        if store_it:
            self._store(result)
        return result

    def _store(self, result: TrustScore) -> None:
        if self.control is not None:
            try:
                self.control.insert_trust_scores([result])
            except StoreError as exc:
                _log.warning("trust score of %s not stored: %s", result.agent_id, exc)

    def agents(self) -> list[str]:
        if self.control is None:
            return sorted(self._cache)
        return self.control.agents()
