"""Launcher integration: what ``opentelemetry-instrument python agent.py`` sets up.

The distro sets defaults (traces over OTLP/gRPC, metrics and logs kept in process); the
configurator builds the tracer provider: resource with the agent's identity, exporters chosen
by ``OTEL_TRACES_EXPORTER`` (:mod:`agentreplay_otel.exporters`: OTLP over gRPC or HTTP carrying
the agent's identity token, or any exporter registered by entry point), a batch queue sized for
bursts, and the hash chain computed on the way into each exporter (on the export thread, not the
agent's). Metrics and logs go where ``OTEL_METRICS_EXPORTER`` and ``OTEL_LOGS_EXPORTER`` say,
with the same resource. The standard ``OTEL_*`` variables keep their meaning; the exporters
read their own.

An agent whose configuration does not verify (a manifest edited or not signed by the org, a
token expired or from another org, a key that is not the token's) does not start: the
launcher would log the configurator's exception and run the agent unguarded and unrecorded,
so the configurator ends the process itself, with the reason in one line on stderr and exit
status 2. ``AGENTREPLAY_START_FAIL_MODE=open`` starts it instead, recorded, without what did
not verify, and with the reason on its resource (``agentreplay.start.error``), which the
collector stores with every span.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Mapping
from importlib.metadata import EntryPoint
from typing import Any, NoReturn

from opentelemetry import _logs, metrics, trace
from opentelemetry.instrumentation.distro import BaseDistro  # type: ignore[attr-defined]
from opentelemetry.sdk._configuration import _BaseConfigurator
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from agentreplay_otel import caches, determinism, exporters, guard, redaction, replay, semconv, settings
from agentreplay_otel.chain import ChainingSpanExporter
from agentreplay_otel.errors import AgentReplayError, ConfigurationError
from agentreplay_otel.instrumentation import _precedence, _support
from agentreplay_otel.runs import RunTracerProvider, end_auto_run
from agentreplay_otel.settings import Settings, env_flag
from agentreplay_otel.version import __version__

_log = logging.getLogger(__name__)

DEFAULT_QUEUE_SIZE = 65_536  # a 50k-span burst fits; the SDK default (2048) dropped 44% of one
DEFAULT_EXPORT_BATCH = 512
DEFAULT_SCHEDULE_DELAY_MS = 1_000  # short-lived agents should not wait 5 s for their first export
EXIT_REFUSED = 2  # the exit status of an agent that does not start


class CountingBatchSpanProcessor(BatchSpanProcessor):
    """A BatchSpanProcessor that counts the spans a full queue drops and says so.

    The SDK logs each drop at WARNING with no total; we keep the total (``dropped``),
    log a summary at most every few seconds, and once more at shutdown. The count reads
    the queue's fill without its lock, so it can be off by a span the exporter took at
    the same instant; the default queue is sized so that it stays at zero.
    """

    _REPORT_EVERY_S = 5.0

    def __init__(self, exporter: SpanExporter, **kwargs: Any) -> None:
        super().__init__(exporter, **kwargs)
        self.dropped = 0
        self._reported = 0
        self._last_report = 0.0
        self._lock = threading.Lock()

    def on_end(self, span: ReadableSpan) -> None:
        inner = getattr(self, "_batch_processor", None)
        queue = getattr(inner, "_queue", None)
        if queue is not None and queue.maxlen is not None and len(queue) >= queue.maxlen:
            with self._lock:
                self.dropped += 1
            self._report(force=False)
        super().on_end(span)

    def _report(self, *, force: bool) -> None:
        now = time.monotonic()
        with self._lock:
            if self.dropped == self._reported or (not force and now - self._last_report < self._REPORT_EVERY_S):
                return
            new, self._reported, self._last_report = self.dropped - self._reported, self.dropped, now
        _log.error(
            "agentreplay: the export queue was full: %d span(s) dropped (%d in all); raise %s",
            new, self.dropped, semconv.ENV_QUEUE_SIZE,
        )

    def shutdown(self) -> None:
        super().shutdown()
        self._report(force=True)


class _AutoRunCloser(SpanProcessor):
    """Ends the auto run when the provider shuts down, before the exporters behind it flush."""

    def shutdown(self) -> None:
        end_auto_run()


def build_tracer_provider(
    environ: Mapping[str, str] | None = None, *, current: Settings | None = None
) -> TracerProvider:
    """The tracer provider the launcher installs; importable so embedders get the same one.

    ``current``: settings already read (the launcher's, possibly those of a fail-open start);
    by default they are read from the environment, and raise if they do not verify.
    """
    env = os.environ if environ is None else environ
    current = settings.from_env(env) if current is None else current
    settings.configure(current)
    creds = current.credentials
    resource = Resource.create(_resource_attributes(env, creds.agent_id, current.start_error))
    provider = RunTracerProvider(resource=resource, id_generator=determinism.PrivateIdGenerator())
    provider.add_span_processor(_AutoRunCloser())  # shut down first: the auto run ends before the flush
    agent_id = resource.attributes.get(semconv.AGENT_ID)
    redactor = redaction.load(env)
    # Whatever the exporter, it is behind the chain, computed on its batcher's export thread.
    for exporter in [*exporters.exporters("traces", env, creds.prover), *replay.spool_exporters(env)]:
        chained = ChainingSpanExporter(exporter, signing_key=creds.signing_key,
                                       agent_id=str(agent_id) if agent_id is not None else None, redactor=redactor)
        provider.add_span_processor(_batcher(chained, env))
    return provider


def _resource_attributes(env: Mapping[str, str], agent_id: str | None, start_error: str) -> dict[str, Any]:
    service = env.get("OTEL_SERVICE_NAME") or agent_id or "agent"
    attrs: dict[str, Any] = {semconv.AGENT_ID: agent_id or service}
    if start_error:
        attrs[semconv.START_ERROR] = start_error
    if env.get(semconv.ENV_AGENT_VERSION):
        attrs[semconv.AGENT_VERSION] = env[semconv.ENV_AGENT_VERSION]
    if not env.get("OTEL_SERVICE_NAME"):
        attrs[semconv.SERVICE_NAME] = service
    return attrs


def _batcher(exporter: SpanExporter, env: Mapping[str, str]) -> BatchSpanProcessor:
    return CountingBatchSpanProcessor(
        exporter,
        max_queue_size=_int_env(env, semconv.ENV_QUEUE_SIZE, "OTEL_BSP_MAX_QUEUE_SIZE", DEFAULT_QUEUE_SIZE),
        max_export_batch_size=_int_env(env, None, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", DEFAULT_EXPORT_BATCH),
        schedule_delay_millis=_int_env(env, None, "OTEL_BSP_SCHEDULE_DELAY", DEFAULT_SCHEDULE_DELAY_MS),
    )


def _int_env(env: Mapping[str, str], ours: str | None, standard: str, default: int) -> int:
    for name in (ours, standard):
        if name and env.get(name):
            try:
                value = int(env[name])
            except ValueError as exc:
                raise ConfigurationError(f"{name}={env[name]!r} is not an integer") from exc
            if value <= 0:
                raise ConfigurationError(f"{name} must be positive, not {value}")
            return value
    return default


class AgentReplayConfigurator(_BaseConfigurator):
    """Installs the AgentReplay tracer provider, and the meter and logger providers the variables ask for.

    The launcher's configurator: if the agent cannot start as configured, it ends the process
    (:func:`refuse_to_start`), because the launcher would swallow an exception and run the
    agent unguarded. Embedders build the same parts with :func:`build_tracer_provider` and
    :func:`agentreplay_otel.guard.install_from_env`, which raise instead.
    """

    def _configure(self, **kwargs: Any) -> None:
        try:
            _start(os.environ)
        except Exception as exc:  # noqa: BLE001 - any failure here would leave the agent unguarded
            refuse_to_start(exc)


def _start(env: Mapping[str, str]) -> None:
    caches.install(env)  # before the agent imports its libraries: their response caches answer nothing
    session = replay.install_from_env()  # before any run opens: a replay's runs are marked as replays
    _install_determinism(session)
    # A replay acts on nothing (tools sandboxed): nothing to enforce or watch; its interceptor stays.
    enforce = replay.active() is None
    current, enforcer = resolve_start(env, enforce=enforce)
    tracer_provider = build_tracer_provider(env, current=current)
    prover = current.credentials.prover
    # Every exporter is made before any is installed: a name that does not load stops the start whole.
    meter_provider = exporters.meter_provider(env, tracer_provider.resource, prover)
    logger_provider = exporters.logger_provider(env, tracer_provider.resource, prover)
    trace.set_tracer_provider(tracer_provider)
    if session is not None:  # the names of the spans a replayed call runs in: its lineage
        tracer_provider.add_span_processor(session.span_names)
    if meter_provider is not None:
        metrics.set_meter_provider(meter_provider)
    if logger_provider is not None:
        _logs.set_logger_provider(logger_provider)
    if enforce:
        guard.start(enforcer)
    _log.debug("agentreplay %s: tracing configured", __version__)


def resolve_start(env: Mapping[str, str], *, enforce: bool) -> tuple[Settings, guard.Guard | None]:
    """The settings and guard an agent starts with, checked before anything starts.

    A key, token or manifest that does not verify raises, unless the start is fail-open
    (``AGENTREPLAY_START_FAIL_MODE=open``): then the agent starts without them, and says why.
    """
    fail_open = settings.fail_open_start(env)
    try:
        current = settings.from_env(env)
        return current, guard.from_settings(current, env) if enforce else None
    except AgentReplayError as exc:
        if not fail_open:
            raise
        reason = _one_line(exc)
    _log.error(
        "agentreplay: %s=open: starting without the enforcement configuration that did not verify: %s",
        semconv.ENV_START_FAIL_MODE, reason,
    )
    current = settings.degraded(env, reason=reason)
    return current, guard.from_settings(current, env) if enforce else None


def refuse_to_start(exc: BaseException) -> NoReturn:
    """End the process before the agent runs: the reason in one line on stderr, exit status 2.

    ``os._exit``: the launcher catches exceptions (and ``SystemExit`` would unwind through its
    ``sitecustomize``); nothing of the agent has run yet, so there is nothing to flush but stderr.
    """
    sys.stdout.flush()
    sys.stderr.write(f"agentreplay: the agent does not start: {_one_line(exc)}\n")
    sys.stderr.flush()
    os._exit(EXIT_REFUSED)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if isinstance(exc, AgentReplayError) else f"{type(exc).__name__}: {text}"


def _install_determinism(session: replay.ReplaySession | None) -> None:
    """Record the agent's clock, uuid and random draws, or serve a recording's back in a replay."""
    if not env_flag(os.environ, semconv.ENV_DETERMINISM, default=True):
        return
    recorded = session.recording.nondeterminism if session is not None else None
    determinism.install(determinism.Draws.from_json(recorded) if recorded else None)


class AgentReplayDistro(BaseDistro):
    """Defaults for the launcher: traces over OTLP/gRPC, metrics and logs kept local."""

    def load_instrumentor(self, entry_point: EntryPoint, **kwargs: Any) -> None:
        """Ours when their own library is there (see ``_support``); every other instrumentor but
        another one of a library ours record (see ``_precedence``)."""
        instrumentor = entry_point.load()()
        if _precedence.ours(entry_point):
            _support.load(instrumentor, **kwargs)
            return
        keep = os.environ.get(semconv.ENV_OTHER_INSTRUMENTORS, "").strip().lower() == "keep"
        twice = _precedence.overlap(entry_point, instrumentor)
        if twice and not keep:
            _precedence.skipped(entry_point, twice)
            return
        instrumentor.instrument(**kwargs)

    def _configure(self, **kwargs: Any) -> None:
        os.environ.setdefault("OTEL_TRACES_EXPORTER", "otlp")
        os.environ.setdefault("OTEL_METRICS_EXPORTER", "none")
        os.environ.setdefault("OTEL_LOGS_EXPORTER", "none")
        os.environ.setdefault("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
