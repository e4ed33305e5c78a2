"""Which exporter each signal goes to, as the standard ``OTEL_*`` variables say.

``OTEL_TRACES_EXPORTER``, ``OTEL_METRICS_EXPORTER`` and ``OTEL_LOGS_EXPORTER`` each list
names (``none`` for nothing). ``otlp`` is built here, over gRPC or HTTP as
``OTEL_EXPORTER_OTLP_{SIGNAL}_PROTOCOL`` or ``OTEL_EXPORTER_OTLP_PROTOCOL`` says, carrying the
agent's identity token (a certificate) beside the exporter's own headers and, on every request, a
fresh proof that the agent holds the certified key (:mod:`agentreplay_otel.proof`), signed over the
bytes sent; every other name is the exporter
registered under it by entry point (``opentelemetry_{signal}_exporter``), as the OpenTelemetry
SDK finds them: ``console``, ``zipkin_json``, ``prometheus``, whatever is installed. A name that
nothing registers, or whose exporter does not load, is a :class:`ConfigurationError` naming the
variable (the launcher then refuses to start the agent, in one line).

The launcher puts every span exporter behind the hash chain (:mod:`agentreplay_otel.chain`);
metrics and logs are exported as the SDK makes them, neither chained nor redacted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, Literal

from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, LogRecordExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export import SpanExporter

from agentreplay_otel.errors import ConfigurationError
from agentreplay_otel.proof import OTLP_TARGETS, PROOF_HEADER, Prover

Signal = Literal["traces", "metrics", "logs"]

OTLP = "otlp"
OTLP_GRPC = "otlp_proto_grpc"
OTLP_HTTP = "otlp_proto_http"
PROTOCOL_GRPC = "grpc"
PROTOCOL_HTTP = "http/protobuf"


@dataclass(frozen=True)
class _SignalKind:
    variable: str  # OTEL_TRACES_EXPORTER, ...
    group: str  # the entry point group its exporters register in
    base: tuple[type, ...]  # what an exporter of this signal is
    grpc: tuple[str, str]  # module, class of the OTLP exporter over gRPC
    http: tuple[str, str]  # and over HTTP
    grpc_method: str  # the gRPC method its exports call
    grpc_response: tuple[str, str]  # module, class of that method's response


_KINDS: dict[Signal, _SignalKind] = {
    "traces": _SignalKind(
        "OTEL_TRACES_EXPORTER", "opentelemetry_traces_exporter", (SpanExporter,),
        ("opentelemetry.exporter.otlp.proto.grpc.trace_exporter", "OTLPSpanExporter"),
        ("opentelemetry.exporter.otlp.proto.http.trace_exporter", "OTLPSpanExporter"),
        "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
        ("opentelemetry.proto.collector.trace.v1.trace_service_pb2", "ExportTraceServiceResponse"),
    ),
    "metrics": _SignalKind(
        "OTEL_METRICS_EXPORTER", "opentelemetry_metrics_exporter", (MetricExporter, MetricReader),
        ("opentelemetry.exporter.otlp.proto.grpc.metric_exporter", "OTLPMetricExporter"),
        ("opentelemetry.exporter.otlp.proto.http.metric_exporter", "OTLPMetricExporter"),
        "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
        ("opentelemetry.proto.collector.metrics.v1.metrics_service_pb2", "ExportMetricsServiceResponse"),
    ),
    "logs": _SignalKind(
        "OTEL_LOGS_EXPORTER", "opentelemetry_logs_exporter", (LogRecordExporter,),
        ("opentelemetry.exporter.otlp.proto.grpc._log_exporter", "OTLPLogExporter"),
        ("opentelemetry.exporter.otlp.proto.http._log_exporter", "OTLPLogExporter"),
        "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
        ("opentelemetry.proto.collector.logs.v1.logs_service_pb2", "ExportLogsServiceResponse"),
    ),
}

DEFAULT_NAMES: dict[Signal, str] = {"traces": OTLP, "metrics": "none", "logs": "none"}
"""What each signal's variable means when unset: traces to OTLP; metrics and logs kept in process."""


def exporter_names(signal: Signal, env: Mapping[str, str]) -> list[str]:
    """The exporters ``OTEL_{SIGNAL}_EXPORTER`` lists, ``none`` left out."""
    raw = env.get(_KINDS[signal].variable)
    if raw is None or not raw.strip():
        raw = DEFAULT_NAMES[signal]
    return [n for n in (part.strip().lower() for part in raw.split(",")) if n and n != "none"]


def exporters(signal: Signal, env: Mapping[str, str], prover: Prover | None) -> list[Any]:
    """One new exporter (or, for metrics, a pull reader) per name ``OTEL_{SIGNAL}_EXPORTER`` lists."""
    return [exporter(signal, name, env, prover) for name in exporter_names(signal, env)]


def exporter(signal: Signal, name: str, env: Mapping[str, str], prover: Prover | None) -> Any:
    if name in (OTLP, OTLP_GRPC, OTLP_HTTP):
        return _otlp(signal, name, env, prover)
    kind = _KINDS[signal]
    found = entry_points(group=kind.group, name=name)
    if not found:
        installed = sorted({OTLP, *(e.name for e in entry_points(group=kind.group))})
        raise ConfigurationError(
            f"{kind.variable}: no exporter named {name!r} is installed (entry point group {kind.group}:"
            f" {', '.join(installed)}; or none)"
        )
    try:
        cls = next(iter(found)).load()
        if not (isinstance(cls, type) and issubclass(cls, kind.base)):
            raise TypeError(f"{cls!r} is not a {' or '.join(b.__name__ for b in kind.base)}")
        return cls()
    except Exception as exc:  # noqa: BLE001 - a plug-in may fail any way; the agent must not start half-configured
        raise ConfigurationError(f"{kind.variable}: the exporter {name!r} does not load: {type(exc).__name__}: "
                                 f"{exc}") from exc


def protocol(signal: Signal, env: Mapping[str, str]) -> str:
    """The OTLP protocol for a signal: its own variable, else the general one, else gRPC."""
    specific = f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL"
    for variable in (specific, "OTEL_EXPORTER_OTLP_PROTOCOL"):
        value = env.get(variable, "").strip().lower()
        if value:
            if value not in (PROTOCOL_GRPC, PROTOCOL_HTTP):
                raise ConfigurationError(f"{variable}={value!r}: use {PROTOCOL_GRPC} or {PROTOCOL_HTTP}")
            return value
    return PROTOCOL_GRPC


def _otlp(signal: Signal, name: str, env: Mapping[str, str], prover: Prover | None) -> Any:
    over_http = name == OTLP_HTTP or (name == OTLP and protocol(signal, env) == PROTOCOL_HTTP)
    check_tls_files(signal, env)
    kind = _KINDS[signal]
    exporter_class = _load(kind.http if over_http else kind.grpc)
    headers = auth_headers(signal, env, prover, "Authorization" if over_http else "authorization")
    if prover is None or prover.key is None:
        return exporter_class(headers=headers, **({"session": ca_session()} if over_http else {}))
    if over_http:
        return exporter_class(headers=headers, session=proving_session(signal, prover))
    exporter = exporter_class(headers=headers)
    prove_grpc(exporter, signal, prover)
    return exporter


TLS_FILE_VARIABLES = ("CERTIFICATE", "CLIENT_CERTIFICATE", "CLIENT_KEY")


def check_tls_files(signal: Signal, env: Mapping[str, str]) -> None:
    """Each TLS file the OTLP variables name (``OTEL_EXPORTER_OTLP_[{SIGNAL}_]CERTIFICATE``, ``_CLIENT_CERTIFICATE``,
    ``_CLIENT_KEY``) is readable: the exporters would log a file they cannot read and carry on with the
    system's CAs, or none, and every export would then fail its handshake, out of sight."""
    for part in TLS_FILE_VARIABLES:
        for variable in (f"OTEL_EXPORTER_OTLP_{signal.upper()}_{part}", f"OTEL_EXPORTER_OTLP_{part}"):
            path = env.get(variable, "").strip()
            if not path:
                continue
            try:
                with open(path, "rb") as fh:
                    fh.read(1)
            except OSError as exc:
                raise ConfigurationError(f"{variable}={path}: not a readable file ({exc.strerror})") from exc


def ca_session() -> Any:
    """A ``requests`` session for an OTLP/HTTP exporter whose CA file (``OTEL_EXPORTER_OTLP_[TRACES_]CERTIFICATE``,
    set on the session by the exporter) is the one checked: requests lets ``REQUESTS_CA_BUNDLE`` or
    ``CURL_CA_BUNDLE`` in the environment replace a session's own CA file on every request, so an agent on a
    machine that sets them (many do, for the system's bundle) would check the collector against the wrong CAs."""
    import requests

    class _Session(requests.Session):
        def merge_environment_settings(self, url: Any, proxies: Any, stream: Any, verify: Any, cert: Any) -> Any:
            settings = super().merge_environment_settings(url, proxies, stream, verify, cert)
            if isinstance(self.verify, str) and verify in (None, True):
                settings["verify"] = self.verify
            return settings

    return _Session()


def _load(where: tuple[str, str]) -> Any:
    module, name = where
    return getattr(__import__(module, fromlist=[name]), name)


def proving_session(signal: Signal, prover: Prover) -> Any:
    """A ``requests`` session for an OTLP/HTTP exporter that sends a proof with each request."""
    session = ca_session()
    session.auth = _ProofAuth(prover, OTLP_TARGETS[signal])
    return session


class _ProofAuth:
    """A ``requests`` auth hook: each OTLP/HTTP request (each retry too) gets a fresh proof over its body."""

    def __init__(self, prover: Prover, target: str) -> None:
        self._prover, self._target = prover, target

    def __call__(self, request: Any) -> Any:
        body = request.body if isinstance(request.body, bytes) else (request.body or "").encode()
        proof = self._prover.proof(request.method or "POST", self._target, body)
        if proof is not None:
            request.headers["AgentReplay-Proof"] = proof
        return request


class _ProvenExport:
    """Stands for the gRPC exporter's stub: serializes each request once and sends those bytes with a
    proof over them (the stub's own serializer would leave the bytes out of reach)."""

    def __init__(self, channel: Any, kind: _SignalKind, prover: Prover, target: str) -> None:
        response = _load(kind.grpc_response)
        self._call = channel.unary_unary(kind.grpc_method, request_serializer=None,
                                         response_deserializer=response.FromString)
        self._prover, self._target = prover, target

    def Export(self, request: Any, metadata: Any = None, timeout: float | None = None, **kwargs: Any) -> Any:  # noqa: N802 - the stub's name
        body = request.SerializeToString()
        proof = self._prover.proof("POST", self._target, body)
        sent = (*(tuple(metadata.items()) if isinstance(metadata, Mapping) else metadata or ()), (PROOF_HEADER, proof))
        return self._call(body, metadata=sent, timeout=timeout, **kwargs)


def prove_grpc(exporter: Any, signal: Signal, prover: Prover) -> None:
    """Make an OTLP/gRPC exporter send a proof with each export: a :class:`_ProvenExport` in place of
    its stub, now and whenever it remakes its channel and stub (it does after a transient error)."""
    kind, target = _KINDS[signal], OTLP_TARGETS[signal]
    remake = getattr(exporter, "_initialize_channel_and_stub", None)
    if remake is not None:
        def initialize() -> None:
            remake()
            exporter._client = _ProvenExport(exporter._channel, kind, prover, target)

        exporter._initialize_channel_and_stub = initialize
    exporter._client = _ProvenExport(exporter._channel, kind, prover, target)


def auth_headers(signal: Signal, env: Mapping[str, str], prover: Prover | None, key: str) -> dict[str, str] | None:
    """The exporter's own headers (``OTEL_EXPORTER_OTLP_[{SIGNAL}_]HEADERS``) plus the agent's certificate."""
    if prover is None:
        return None  # let the exporter read its headers from the environment itself
    raw = env.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_HEADERS") or env.get("OTEL_EXPORTER_OTLP_HEADERS") or ""
    headers = {}
    for pair in raw.split(","):
        if "=" in pair:
            k, v = pair.split("=", 1)
            headers[k.strip().lower() if key.islower() else k.strip()] = v.strip()
    headers[key] = prover.authorization
    return headers


def meter_provider(env: Mapping[str, str], resource: Resource, prover: Prover | None) -> MeterProvider | None:
    """Metrics where ``OTEL_METRICS_EXPORTER`` says (pushed every ``OTEL_METRIC_EXPORT_INTERVAL``, and at exit);
    None when it names none: an SDK provider with no reader would still aggregate every record (a few µs
    per stream chunk) for nobody, while the API's default provider drops them for free."""
    readers: list[MetricReader] = []
    for found in exporters("metrics", env, prover):
        readers.append(found if isinstance(found, MetricReader) else PeriodicExportingMetricReader(found))
    return MeterProvider(resource=resource, metric_readers=readers) if readers else None


def logger_provider(env: Mapping[str, str], resource: Resource, prover: Prover | None) -> LoggerProvider | None:
    """Log records (the events some instrumentors put message content in) where ``OTEL_LOGS_EXPORTER``
    says; None when it names none, so nothing is set up for nothing."""
    found = exporters("logs", env, prover)
    if not found:
        return None
    provider = LoggerProvider(resource=resource)
    for log_exporter in found:
        provider.add_log_record_processor(BatchLogRecordProcessor(log_exporter))
    return provider
