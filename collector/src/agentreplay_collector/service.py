"""The collector process: builds every stage from the config, in one place, serves, and stops cleanly.

:class:`Collector` wires each stage itself, so reading it says what sees an export. A span of an
accepted export passes, in order: ``agentreplay_auth``, the run owners, ``agentreplay_scope`` (spend,
halts), the live feed (when the control endpoint serves the console: it sees every accepted export
and every halt, resume and alert the control writer is handed), the batcher's write; then
``agentreplay_chain`` judges the written runs, the transparency log takes its verdicts and
``agentreplay_analysis`` the judged runs. The feed and the console are handed their parts; neither
reaches into the collector.

Everything network-facing (gRPC, OTLP/HTTP, the control API) runs in one asyncio loop;
the store writer and the chain verifier each have a thread. If the store cannot be
reached at start, the receivers still come up and answer UNAVAILABLE (so senders retry)
while the schema is retried in the background.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
from dataclasses import dataclass
from typing import Any

from agentreplay_client.errors import StoreUnavailable
from agentreplay_collector import budget as memory
from agentreplay_collector import console, otlp_logs, otlp_metrics
from agentreplay_collector.access import ReadAccess
from agentreplay_collector.admission import Admission, Priority, control_route
from agentreplay_collector.analysis import AnalysisWorker
from agentreplay_collector.auth import AuthProcessor, KeyRing
from agentreplay_collector.batch import Batcher, Stage
from agentreplay_collector.chainproc import ChainProcessor
from agentreplay_collector.config import CollectorConfig
from agentreplay_collector.connections import ConnectionLimits
from agentreplay_collector.forward import Fanout
from agentreplay_collector.live import LiveFeed
from agentreplay_collector.ownership import RunOwners
from agentreplay_collector.pipeline import Pipeline, RequestProcessor
from agentreplay_collector.principal import Gate
from agentreplay_collector.readapi import build_app as build_read_app
from agentreplay_collector.receivers.grpc import GrpcReceiver
from agentreplay_collector.receivers.http import HttpReceiver
from agentreplay_collector.scope import ScopeProcessor
from agentreplay_collector.signals import SignalPipeline
from agentreplay_collector.store import Store, schema
from agentreplay_collector.translog import TransparencyLog

_log = logging.getLogger("agentreplay_collector")
_SCHEMA_RETRY_S = 2.0


@dataclass(frozen=True, kw_only=True)
class Endpoints:
    """Where a started collector listens (ports resolved when the config said 0)."""

    grpc: str | None
    http: str | None
    control: str | None

    def to_json(self) -> dict[str, str | None]:
        return {"grpc": self.grpc, "http": self.http, "control": self.control}


class Collector:
    def __init__(self, config: CollectorConfig, *, store: Store | None = None) -> None:
        self.config = config
        if store is None and config.clickhouse is not None:
            store = Store.from_config(config.clickhouse)
        self.store = store  # None: the nop exporter (receive-only)
        # one memory budget for every buffer kept for others; Authorize answered ahead of bulk ingest
        self.budget = memory.MemoryBudget(config.memory.limit if config.memory else memory.default_limit())
        self.priority = Priority()
        self.keys = KeyRing()
        self.auth = AuthProcessor(config.auth, self.keys) if config.auth else None
        if self.auth is None:
            _log.warning("no agentreplay_auth processor in the pipeline: exports are NOT authenticated")
        # the transparency log: every verdict a leaf; checkpoints signed when a log key is configured
        self.log = TransparencyLog.from_config(store.log, config.transparency) if config.chain and store else None
        self.chain = (
            ChainProcessor(
                config.chain, store.runs, self.keys, org_key=self.auth.org_key if self.auth else None, log=self.log,
                budget=self.budget,
            )
            if config.chain and store
            else None
        )
        self.batcher = (
            Batcher(config.batch, store.runs, self.chain.observe if self.chain else None) if store else None
        )
        self.owners = RunOwners(store.control if store else None)
        self.scope = self._build_scope(config, store, self.owners)
        if self.scope is not None:
            self.scope.replays.budget = self.budget  # replayed spans held for their run span
        # agentreplay_analysis: finished runs analysed for failure modes, from the store, on a thread
        self.analysis = (AnalysisWorker(config.analysis, store, signer=self.log.signer if self.log else None)
                         if config.analysis and store else None)
        if self.analysis is not None:
            self.analysis.budget = self.budget  # a run rendered into an incident
            if self.chain is not None:
                self.chain.on_judged = self.analysis.notify  # a run analysed once its verdict is in, not a poll later
        # the live feed, for the console on the control endpoint (/v1/live): every halt, resume and alert
        # the control writer is handed, and (a stage below) every accepted export
        self.live = (LiveFeed(scope=self.scope, owners=self.owners, store=store, analysed=self.analysis is not None,
                              budget=self.budget)
                     if config.control is not None else None)
        if self.live is not None and self.scope is not None:
            self.scope.writer.listeners.append(self.live.on_control)
        # the stages between conversion and the write, in order: the scope counts an export's spend (and
        # may refuse it), then the feed sees what was accepted, its spend counted
        stages: list[RequestProcessor] = [s for s in (self.scope, self.live) if s is not None]
        self.pipeline = Pipeline(
            auth=self.auth,
            batcher=self.batcher,
            processors=stages,
            owners=self.owners,
            priority=self.priority,
        )
        # OTLP metrics and logs: the same receivers and auth, into the contrib exporter's tables
        # (or checked and dropped, as the nop exporter, when no pipeline of theirs stores)
        self.signals = [
            SignalPipeline(kind, auth=self.auth, store=store if kind.name in config.stored_signals else None)
            for kind in (otlp_metrics.SIGNAL, otlp_logs.SIGNAL)
        ]
        # the otlp / otlphttp exporters: every export a pipeline accepted, forwarded from a queue
        self.fanout = Fanout.from_config(config.forwarders, config.forwards) if config.forwarders else None
        for forwarder in self.fanout.forwarders.values() if self.fanout else ():
            forwarder.budget = self.budget  # queued exports count against the budget's forwarding share
        otlp = config.otlp
        self.grpc = (GrpcReceiver(otlp.grpc, self.pipeline, self.signals, self.fanout, budget=self.budget)
                     if otlp.grpc else None)
        self.http = (HttpReceiver(otlp.http, self.pipeline, self.signals, self.fanout, budget=self.budget)
                     if otlp.http else None)
        self._control = None
        if config.control is not None:
            from agentreplay_collector.asgi import AsgiServer

            admin_token = config.scope.admin_token if config.scope is not None else None
            access = ReadAccess(auth=self.auth, admin_token=admin_token, insecure=config.control.insecure)
            if config.control.insecure:
                _log.warning("agentreplay_control is insecure: the read API answers without a token (loopback only)")
            app = build_read_app(self.store, self.stats, access=access, owners=self.owners,
                                 agent_stats=self.agent_stats)
            if self.scope is not None:
                from agentreplay_collector import controlapi

                app.router.routes.extend(controlapi.routes(self.scope, self.auth, admin_token, access))
            incidents = config.analysis.incidents if config.analysis is not None else None
            app.router.routes.extend(console.routes(  # /ui, the live feed and incident files
                access, feed=self.live, store=self.store, incidents=incidents.dir if incidents else None,
                owners=self.owners))
            app.router.routes.extend(self._identity_routes(config))  # the collector proves itself to the CLI
            limits = ConnectionLimits("control")
            open_to_all = config.control.insecure or self.auth is None or self.auth.insecure
            guarded = Admission(app, budget=self.budget, route=control_route(self.budget), priority=self.priority,
                                gate=Gate(self.auth, admin_token, open_to_all=open_to_all), connections=limits)
            self._control = AsgiServer(guarded, config.control.endpoint, "control", tls=config.control.tls,
                                       limits=limits)
        for key, tls, endpoint in self._listeners(config):
            if tls is None and not endpoint.is_loopback:
                _log.warning("%s listens on %s in plaintext: tokens and runs cross the network readable "
                             "(set its tls: cert_file, key_file; agentreplay init --production --tls)", key, endpoint)
        self._schema_task: asyncio.Task[None] | None = None
        self._stopped = asyncio.Event()

    def _identity_routes(self, config: CollectorConfig) -> list[Any]:
        """``POST /v1/identity``: a challenge signed with the transparency-log key (:mod:`.identityapi`)."""
        from agentreplay_collector import identityapi
        from agentreplay_collector.translog import LogSigner

        if config.transparency is None:
            return identityapi.routes(None, None)
        signer = self.log.signer if self.log is not None and self.log.signer is not None else None
        signer = signer or LogSigner.load(config.transparency)
        return identityapi.routes(signer.key, signer.certificate)

    @staticmethod
    def _listeners(config: CollectorConfig) -> list[tuple[str, Any, Any]]:
        """Each listener's config key, its ``tls`` and its endpoint."""
        from agentreplay_collector.config import tls_listeners

        ends = [c.endpoint for c in (config.otlp.grpc, config.otlp.http, config.control) if c is not None]
        return [(key, tls, end) for (key, tls), end in zip(tls_listeners(config), ends, strict=True)]

    @staticmethod
    def _build_scope(config: CollectorConfig, store: Store | None, owners: RunOwners) -> ScopeProcessor | None:
        """``agentreplay_scope``: manifests, spend, halts, alerts (its writer starts with the collector)."""
        if config.scope is None:
            return None
        from agentreplay_collector.alerts import ControlWriter
        from agentreplay_collector.trust import TrustBook, load_tiers
        from agentreplay_otel.core import load_public_key

        cfg = config.scope
        org = config.auth.org_public_key if config.auth and not config.auth.insecure else None
        control = store.control if store is not None else None  # what the writer and the trust book use
        return ScopeProcessor(
            cfg,
            store,
            org_public_key=load_public_key(org) if org else None,
            writer=ControlWriter(
                control, webhooks=cfg.webhooks, retries=cfg.webhook_retries, timeout_s=cfg.webhook_timeout_s
            ),
            trust=TrustBook(control, tiers=load_tiers(cfg.trust_tiers), refresh_s=cfg.trust_refresh_s),
            owners=owners,
        )

    # --- lifecycle -------------------------------------------------------------------------
    async def start(self) -> Endpoints:
        self.budget.start()  # freed buffers go back to the system
        if self.fanout is not None:
            self.fanout.start()
        if self.scope is not None:
            self.scope.start()
        if self.batcher is not None:
            self.batcher.hold("the store is being opened")
            self.batcher.start()
            if not await self._prepare_store():
                self._schema_task = asyncio.create_task(self._retry_store(), name="store-retry")
        if self.grpc:
            await self.grpc.start()
        if self.http:
            await self.http.start()
        if self._control:
            await self._control.start()
        return self.endpoints

    async def _prepare_store(self) -> bool:
        assert self.batcher is not None and self.config.clickhouse is not None
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, self._open_store)
        except StoreUnavailable as exc:
            _log.warning(
                "store %s not ready, exports answer UNAVAILABLE until it is: %s",
                self.config.clickhouse.endpoint,
                exc,
            )
            self.batcher.hold(str(exc))
            return False
        self.batcher.release()
        return True

    def _open_store(self) -> None:
        ch = self.config.clickhouse
        assert ch is not None and self.store is not None
        if ch.create_schema:
            self.store.ensure_schema(
                schema.SchemaOptions(
                    database=self.store.database, ttl_s=ch.ttl_s, cluster_name=ch.cluster_name
                )
            )
        else:
            self.store.check()
        if self.log is not None:
            self.log.open()
            self.log.start()
        if self.chain is not None:
            self.chain.resume(self.store.runs.pending())
            self.chain.start()
        if self.scope is not None:
            self.scope.rebuild(self.store)
            # the threads Authorize may wait on open their store connections now
            self.owners.warm()
            self.scope.trust.warm()
        if self.analysis is not None:
            self.analysis.start()

    async def _retry_store(self) -> None:
        while not await self._prepare_store():
            await asyncio.sleep(_SCHEMA_RETRY_S)
        _log.info("store %s is ready", self.store and self.store.endpoint)

    @property
    def endpoints(self) -> Endpoints:
        def at(cfg: Any, port: int) -> str | None:  # a TLS listener as https://host:port
            if cfg is None:
                return None
            return f"{'https://' if cfg.tls is not None else ''}{cfg.endpoint.host}:{port}"

        return Endpoints(
            grpc=at(self.config.otlp.grpc, self.grpc.port) if self.grpc else None,
            http=at(self.config.otlp.http, self.http.port) if self.http else None,
            control=at(self.config.control, self._control.port) if self._control else None,
        )

    async def stop(self) -> None:
        """Stop taking exports, write what was accepted, judge finished runs, close the store."""
        if self._schema_task is not None:
            self._schema_task.cancel()
        if self.grpc:
            await self.grpc.stop()
        if self.http:
            await self.http.stop()
        loop = asyncio.get_running_loop()
        for signal_pipeline in self.signals:  # the metrics and logs being written
            await loop.run_in_executor(None, signal_pipeline.shutdown)
        if self.fanout is not None:  # what the forwarders hold: sent for a few seconds, then dropped, counted
            await loop.run_in_executor(None, self.fanout.shutdown)
        for stage in self._stages():  # in pipeline order: each finishes what the one before handed on
            await loop.run_in_executor(None, stage.shutdown)
        if self._control:
            await self._control.stop()
        if self.live is not None:  # its viewers went with the control endpoint
            self.live.shutdown()
        self.pipeline.shutdown()
        if self.store is not None:
            self.store.close()
        self.budget.shutdown()
        self._stopped.set()

    def _stages(self) -> list[Stage]:
        """The stages with threads, in pipeline order: the writer, the chain verdicts, the log's
        checkpoints (after the verdicts it logs), the control rows."""
        return [s for s in (self.batcher, self.chain, self.log, self.scope, self.analysis) if s is not None]

    def force_flush(self, timeout_s: float = 30.0) -> bool:
        """Write what was accepted, judge the runs whose run span has arrived, write the control rows."""
        return all([stage.force_flush(timeout_s) for stage in self._stages()])

    async def serve_forever(self) -> None:
        """Start, say where it listens (one JSON line on stdout), run until SIGTERM/SIGINT."""
        endpoints = await self.start()
        sys.stdout.write("agentreplay-collector ready " + json.dumps(endpoints.to_json()) + "\n")
        sys.stdout.flush()
        _log.info("listening: %s", endpoints.to_json())
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        _log.info("stopping")
        await self.stop()

    def agent_stats(self, agent_id: str) -> dict[str, Any]:
        """What ``/v1/stats`` tells one agent's token besides the endpoints: its own figures only."""
        return {"halts": len(self.scope.halts_of(agent_id)) if self.scope else 0}

    def stats(self) -> dict[str, Any]:
        return {
            "endpoints": self.endpoints.to_json(),  # where to send OTLP (the replay CLI asks)
            "exports": self.pipeline.exports,
            "accepted_spans": self.pipeline.accepted_spans,
            "written_spans": self.batcher.written_spans if self.batcher else 0,
            "inserts": self.batcher.inserts if self.batcher else 0,
            "queued_spans": self.batcher.queued_spans if self.batcher else 0,
            "runs_in_flight": self.chain.runs_in_flight if self.chain else 0,
            "buffered_spans": self.chain.buffered_spans if self.chain else 0,
            "verified_runs": self.chain.verified_runs if self.chain else 0,
            "verified_spans": self.chain.verified_spans if self.chain else 0,
            "foreign_runs": self.chain.foreign_runs if self.chain else 0,
            "log_size": self.log.size if self.log else 0,
            "log_damaged": self.log.damaged if self.log else "",
            **{s.signal.name: s.stats() for s in self.signals},  # exports and rows written
            **({"scope": self.scope.stats()} if self.scope else {}),
            **({"analysis": self.analysis.stats()} if self.analysis else {}),
            **({"exporters": self.fanout.stats()} if self.fanout else {}),  # forwarding: sent, queued, dropped
            "buffered_bytes": self.chain.buffered_bytes if self.chain else 0,
            "memory": self.budget.stats(),  # the budget: each consumer's bytes held, its cap and refusals
            # OS thread ids, for per-thread CPU accounting (/proc/PID/task/TID/stat)
            "threads": {
                "writer": self.batcher.native_thread_id if self.batcher else 0,
                "chain": self.chain.native_thread_id if self.chain else 0,
            },
        }
