"""The collector's config: the OpenTelemetry Collector grammar, validated into frozen dataclasses.

The file has the shape an ``otelcol`` user already knows (``receivers``, ``processors``,
``exporters``, ``extensions``, ``service.pipelines`` for ``traces``, ``metrics`` and ``logs``,
named ones like ``traces/forward`` too), ``${env:VAR}`` and
``${env:VAR:-default}`` are substituted in values, and every key is checked on start:
an unknown key or a bad value raises :class:`ConfigError` naming the key's dotted path
and what was expected, so a typo never silently becomes a default.

The whole grammar is one module, longer than most on purpose: the config's dataclasses
(the defaults), then one parser per section (the checks), read top to bottom in one place.
"""

from __future__ import annotations

import ipaddress
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from agentreplay_analysis import verdict
from agentreplay_analysis.settings import JudgeSettings
from agentreplay_client.errors import ConfigError
from agentreplay_client.incidents import IncidentCaps
from agentreplay_client.reader import DEFAULT_CONTROL_HOST, DEFAULT_CONTROL_PORT
from agentreplay_client.tls import DEFAULT_MIN_VERSION, ServerTls, TlsFileError, check_server_tls
from agentreplay_collector import budget
from agentreplay_otel.core import (
    IdentityError,
    key_id,
    load_private_key,
    load_public_key,
    verify_log_certificate,
)

PIPELINE_ORDER = ("agentreplay_auth", "agentreplay_chain", "agentreplay_scope", "batch")
"""Where each processor may stand in a traces pipeline's ``processors``.

``agentreplay_scope`` (signed manifests, spend, kill switch) stands between the chain
check and the batch: it sees every span before it is written.
"""
SIGNALS = ("traces", "metrics", "logs")
SIGNAL_PROCESSORS = {
    "traces": PIPELINE_ORDER,
    "metrics": ("agentreplay_auth", "batch"),
    "logs": ("agentreplay_auth", "batch"),
}
"""The processors a pipeline of each signal runs (chain and scope judge spans: traces only)."""
LOCAL_EXPORTERS = ("clickhouse", "nop")
FORWARD_EXPORTERS = ("otlp", "otlphttp")
MIB = 1024 * 1024


@dataclass(frozen=True, kw_only=True)
class Endpoint:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def is_loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


@dataclass(frozen=True, kw_only=True)
class GrpcReceiverConfig:
    endpoint: Endpoint = Endpoint(host="127.0.0.1", port=4317)
    max_recv_msg_size_mib: int = 16
    include_metadata: bool = False  # the request's authorization may travel on (headers_setter)
    tls: ServerTls | None = None  # None: plaintext


@dataclass(frozen=True, kw_only=True)
class HttpReceiverConfig:
    endpoint: Endpoint = Endpoint(host="127.0.0.1", port=4318)
    max_request_body_size: int = 16 * MIB
    include_metadata: bool = False
    tls: ServerTls | None = None  # None: plaintext


@dataclass(frozen=True, kw_only=True)
class OtlpReceiverConfig:
    grpc: GrpcReceiverConfig | None = None
    http: HttpReceiverConfig | None = None


@dataclass(frozen=True, kw_only=True)
class AuthConfig:
    insecure: bool = False
    org_public_key: Path | None = None
    token_cache_size: int = 1024
    proof_max_age_s: float = 60.0  # how old (or how far ahead) an agent's proof of possession may be
    proof_ledger_size: int = 200_000  # proofs remembered (single use) while they are fresh, all agents together
    proof_rate_per_agent: int = 100  # requests a second one agent may sustain: its ledger holds this times max age
    proof_covers_body: bool = True  # false behind a gateway that re-encodes exports (otelcol)
    # agent ids the org issued to gateways: their exports may hold resources that name no agent (other
    # instrumentations' spans they forward), stored as unclaimed (foreign) spans owned by the gateway
    gateways: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ChainConfig:
    quiet_period_s: float = 2.0
    incomplete_after_s: float = 300.0
    max_buffered_spans: int = 200_000
    # a foreign run (another instrumentation's GenAI trace) whose root span has not come: judged once nothing
    # of it came for this long (a root in another process, never exported, or a parent outside the trace)
    foreign_quiet_period_s: float = 5.0


@dataclass(frozen=True, kw_only=True)
class BatchConfig:
    timeout_s: float = 0.2
    send_batch_size: int = 8192
    send_batch_max_size: int = 65536
    max_queued_spans: int = 262_144


@dataclass(frozen=True, kw_only=True)
class ClickHouseConfig:
    endpoint: str = "chdb://./.agentreplay/store"
    database: str = "agentreplay"
    create_schema: bool = True
    ttl_s: int = 0
    cluster_name: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    timeout_s: float = 10.0


@dataclass(frozen=True, kw_only=True)
class ControlConfig:
    """``agentreplay_control``: the read and control API. ``insecure``: reads need no token
    (loopback only; local development)."""

    endpoint: Endpoint = Endpoint(host=DEFAULT_CONTROL_HOST, port=DEFAULT_CONTROL_PORT)
    insecure: bool = False
    tls: ServerTls | None = None  # None: plaintext


@dataclass(frozen=True, kw_only=True)
class ScopeConfig:
    """``agentreplay_scope``: manifests, spend caps, halts, alerts (see docs/control.md)."""

    require_manifests: bool = False
    manifests_dir: Path | None = None
    admin_token: str | None = field(default=None, repr=False)
    admin_token_file: Path | None = None  # where admin_token was read from, if a file
    webhooks: tuple[str, ...] = ()
    webhook_retries: int = 5
    webhook_timeout_s: float = 5.0
    trust_tiers: Path | None = None
    trust_refresh_s: float = 60.0


@dataclass(frozen=True, kw_only=True)
class TransparencyConfig:
    """``agentreplay_transparency``: the key that signs the transparency log's checkpoints and the
    org's certificate of it (docs/transparency.md). Without it the log is kept, unsigned."""

    signing_key: Path
    certificate: Path
    checkpoint_interval_s: float = 10.0
    checkpoint_refresh_s: float = 3600.0


@dataclass(frozen=True, kw_only=True)
class PipelineConfig:
    """One of ``service.pipelines``: ``name`` as written (``traces``, ``traces/forward``)."""

    receivers: tuple[str, ...]
    processors: tuple[str, ...]
    exporters: tuple[str, ...]
    name: str = "traces"
    signal: str = "traces"  # traces | metrics | logs


TracesPipeline = PipelineConfig


@dataclass(frozen=True, kw_only=True)
class TlsSettings:
    """An exporter's ``tls``: ``insecure`` is plaintext; otherwise TLS, checked against ``ca_file``
    (the system's roots without it); ``cert_file`` and ``key_file`` for mutual TLS."""

    insecure: bool = False
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    insecure_skip_verify: bool = False


@dataclass(frozen=True, kw_only=True)
class QueueSettings:
    """``sending_queue``: ``queue_size`` exports wait at most (past that one is dropped, counted);
    ``num_consumers`` are sent at once."""

    num_consumers: int = 10
    queue_size: int = 1000


@dataclass(frozen=True, kw_only=True)
class RetrySettings:
    """``retry_on_failure``: exponential backoff with jitter, as otelcol's exporters retry."""

    enabled: bool = True
    initial_interval_s: float = 5.0
    randomization_factor: float = 0.5
    multiplier: float = 1.5
    max_interval_s: float = 30.0
    max_elapsed_time_s: float = 300.0  # 0: retry until the queue is shut down


@dataclass(frozen=True, kw_only=True)
class ForwardConfig:
    """An ``otlp`` (gRPC) or ``otlphttp`` (protobuf over HTTP) exporter: forwards what its pipelines
    receive, as received, to another OTLP backend.

    ``endpoint``: ``host:port`` for ``otlp``; the base URL for ``otlphttp``, to which ``/v1/traces``,
    ``/v1/metrics``, ``/v1/logs`` are appended unless ``urls`` names a signal's own."""

    name: str  # the component id, ``otlp/jaeger``
    kind: str  # otlp | otlphttp
    endpoint: str
    urls: Mapping[str, str] = field(default_factory=dict)  # otlphttp: signal -> URL
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    tls: TlsSettings = TlsSettings()
    timeout_s: float = 5.0
    compression: str = "gzip"  # gzip | none
    queue: QueueSettings = QueueSettings()
    retry: RetrySettings = RetrySettings()
    authenticator: str | None = None  # ``auth.authenticator``: a headers_setter extension's id
    from_request: tuple[str, ...] = ()  # headers set to the export's own authorization (headers_setter)
    identity: ForwardIdentity | None = None  # ``auth.authenticator`` an agentreplay_identity: sign each send


@dataclass(frozen=True, kw_only=True)
class ForwardIdentity:
    """``agentreplay_identity``: the credential a forwarding exporter authenticates with to another AgentReplay
    collector, as an agent does: the org's certificate (identity token) of a key, and that key, which signs a
    fresh proof of possession over each request's bytes (a gateway's own identity: docs/security.md)."""

    name: str  # the extension's id
    identity_file: Path
    key_file: Path


@dataclass(frozen=True, kw_only=True)
class HeadersSetter:
    """``headers_setter`` (as otelcol-contrib's): headers an exporter adds to each request, a fixed
    ``value`` or ``from_context: authorization``, the token the export came with."""

    values: Mapping[str, str] = field(default_factory=dict, repr=False)
    from_request: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class SecretFile:
    """A key or token file the config names (``key``: its dotted path), which no one else may open."""

    key: str
    path: Path


DETECTORS = verdict.DETECTORS
"""The classifier whose verdict marks a run as analysed: the default analyzer's (:mod:`agentreplay_analysis`)."""


JUDGE_PROVIDERS = ("openai", "anthropic")  # the judge's (agentreplay_analysis.judge.PROVIDERS)
JUDGE_METHODS = ("all_at_once", "step_by_step", "binary_search")  # and its methods (judge.METHODS)


@dataclass(frozen=True, kw_only=True)
class IncidentSettings:
    """Where halted runs' incidents are written, and how many (and how many bytes) are kept per agent
    and in all, the oldest removed first; the case is checked against the org key (auth's)."""

    dir: Path
    caps: IncidentCaps = field(default_factory=IncidentCaps)
    org_public_key: Path | None = None  # agentreplay_auth's, filled in by the config


@dataclass(frozen=True, kw_only=True)
class AnalysisConfig:
    """``agentreplay_analysis`` (an extension of the collector's config)."""

    analyzer: str = DETECTORS  # the entry point's name in ANALYZER_GROUP
    poll_interval_s: float = 2.0
    batch: int = 100  # runs taken from the backlog per round
    judge: JudgeSettings | None = None
    incidents: IncidentSettings | None = None


@dataclass(frozen=True, kw_only=True)
class MemoryConfig:
    """``agentreplay_memory`` (an extension): the one memory budget every buffer the collector keeps for
    others counts against, in bytes (:mod:`agentreplay_collector.budget`). ``configured``: the file set it
    (else the default: the smaller of 1 GiB and a quarter of the machine's memory)."""

    limit: int
    configured: bool = False


@dataclass(frozen=True, kw_only=True)
class CollectorConfig:
    """The validated config. Only the components the pipelines use are kept.

    ``pipeline`` is the traces pipeline that stores (or the first traces pipeline when none
    does); ``stored_signals`` the signals written to the store; ``forwards`` each signal's
    forwarding exporters (ids in ``forwarders``)."""

    otlp: OtlpReceiverConfig
    auth: AuthConfig | None
    chain: ChainConfig | None
    batch: BatchConfig
    clickhouse: ClickHouseConfig | None  # None with the ``nop`` exporter (receive-only)
    control: ControlConfig | None
    pipeline: TracesPipeline
    log_level: str = "info"
    scope: ScopeConfig | None = None
    analysis: AnalysisConfig | None = None  # agentreplay_analysis, an extension
    transparency: TransparencyConfig | None = None
    secret_files: tuple[SecretFile, ...] = ()  # key and token files the config names: owner-only
    pipelines: tuple[PipelineConfig, ...] = ()
    stored_signals: frozenset[str] = frozenset(SIGNALS)
    forwarders: Mapping[str, ForwardConfig] = field(default_factory=dict)
    forwards: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    memory: MemoryConfig | None = None  # None: the default budget (parse_config always sets it)


# --- substitution ------------------------------------------------------------------
_ENV_REF = re.compile(r"\$\$|\$\{env:([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def substitute(value: Any, path: str, environ: Mapping[str, str]) -> Any:
    """Expand ``${env:VAR}`` / ``${env:VAR:-default}`` in every string, ``$$`` for a literal ``$``.

    As in the OpenTelemetry Collector, a value that is exactly one reference takes the
    YAML type of what it expands to (``insecure: ${env:X}`` with ``X=true`` is a bool).
    """
    if isinstance(value, dict):
        return {k: substitute(v, _join(path, str(k)), environ) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, f"{path}[{i}]", environ) for i, v in enumerate(value)]
    if not isinstance(value, str) or "$" not in value:
        return value

    def expand(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, default = match.group(1), match.group(2)
        if name in environ:
            return environ[name]
        if default is not None:
            return default
        raise ConfigError(
            path, f"environment variable {name} to be set (or a default: ${{env:{name}:-value}})"
        )

    expanded = _ENV_REF.sub(expand, value)
    whole = _ENV_REF.fullmatch(value)
    if whole and whole.group(0) != "$$":
        try:
            return yaml.safe_load(expanded) if expanded.strip() else expanded
        except yaml.YAMLError:
            return expanded
    return expanded


# --- a section reader that refuses unknown keys ---------------------------------------
class _Section:
    """Reads typed values out of one mapping; :meth:`done` rejects any key it did not read."""

    def __init__(self, path: str, raw: Any) -> None:
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise ConfigError(path, "a mapping", raw)
        self.path = path
        self.raw = raw
        self.seen: set[str] = set()

    def at(self, key: str) -> str:
        return _join(self.path, key)

    def has(self, key: str) -> bool:
        return key in self.raw

    def get(self, key: str) -> Any:
        self.seen.add(key)
        return self.raw.get(key)

    def section(self, key: str) -> _Section:
        return _Section(self.at(key), self.get(key))

    def string(self, key: str, default: str | None = None) -> str | None:
        value = self.get(key)
        if value is None:
            return default
        if not isinstance(value, str) or not value:
            raise ConfigError(self.at(key), "a non-empty string", value)
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise ConfigError(self.at(key), "true or false", value)
        return value

    def integer(self, key: str, default: int, *, minimum: int = 0, maximum: int | None = None) -> int:
        value = self.get(key)
        if value is None:
            return default
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or value < minimum
            or (maximum is not None and value > maximum)
        ):
            bound = f" between {minimum} and {maximum}" if maximum is not None else f" >= {minimum}"
            raise ConfigError(self.at(key), f"an integer{bound}", value)
        return value

    def duration(self, key: str, default: float) -> float:
        value = self.get(key)
        if value is None:
            return default
        seconds = parse_duration(value)
        if seconds is None:
            raise ConfigError(self.at(key), "a duration like 200ms, 5s, 1m30s or 720h", value)
        return seconds

    def endpoint(self, key: str, default: Endpoint) -> Endpoint:
        value = self.get(key)
        if value is None:
            return default
        parsed = parse_endpoint(value)
        if parsed is None:
            raise ConfigError(self.at(key), "host:port, e.g. 127.0.0.1:4317 (port 0 picks a free one)", value)
        return parsed

    def string_list(self, key: str) -> tuple[str, ...]:
        value = self.get(key)
        if value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise ConfigError(self.at(key), "a list of component ids", value)
        return tuple(value)

    def done(self) -> None:
        for key in self.raw:
            if key not in self.seen:
                raise ConfigError(
                    self.at(str(key)), f"one of the keys {sorted(self.seen) or 'none'}; unknown key"
                )


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value: Any) -> float | None:
    """Seconds in a Go duration string (``200ms``, ``1m30s``); ``0`` is zero. None if not one."""
    if value == 0 or value == "0":
        return 0.0
    if not isinstance(value, str) or not value:
        return None
    pos, total = 0, 0.0
    for match in _DURATION_PART.finditer(value):
        if match.start() != pos:
            return None
        total += float(match.group(1)) * _UNIT_S[match.group(2)]
        pos = match.end()
    return total if pos == len(value) else None


def parse_endpoint(value: Any) -> Endpoint | None:
    if not isinstance(value, str) or ":" not in value:
        return None
    host, _, port = value.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or int(port) > 65535:
        return None
    return Endpoint(host=host, port=int(port))


# --- components -----------------------------------------------------------------------
def _component_type(component_id: str) -> str:
    return component_id.split("/", 1)[0]


def _parse_otlp(sec: _Section) -> OtlpReceiverConfig:
    protocols = sec.section("protocols")
    grpc = http = None
    if protocols.has("grpc"):
        g = protocols.section("grpc")
        grpc = GrpcReceiverConfig(
            endpoint=g.endpoint("endpoint", GrpcReceiverConfig.endpoint),
            max_recv_msg_size_mib=g.integer("max_recv_msg_size_mib", 16, minimum=1, maximum=2047),
            include_metadata=g.boolean("include_metadata", False),
            tls=_parse_server_tls(g, grpc=True),
        )
        g.done()
    if protocols.has("http"):
        h = protocols.section("http")
        http = HttpReceiverConfig(
            endpoint=h.endpoint("endpoint", HttpReceiverConfig.endpoint),
            max_request_body_size=h.integer("max_request_body_size", 16 * MIB, minimum=1),
            include_metadata=h.boolean("include_metadata", False),
            tls=_parse_server_tls(h),
        )
        h.done()
    protocols.done()
    sec.done()
    if grpc is None and http is None:
        raise ConfigError(protocols.path, "at least one of the protocols grpc, http")
    return OtlpReceiverConfig(grpc=grpc, http=http)


def _parse_auth(sec: _Section) -> AuthConfig:
    insecure = sec.boolean("insecure", False)
    key = sec.string("org_public_key")
    cache = sec.integer("token_cache_size", 1024, minimum=1)
    max_age = sec.duration("proof_max_age", 60.0)
    ledger = sec.integer("proof_ledger_size", 200_000, minimum=1000)
    rate = sec.integer("proof_rate_per_agent", 100, minimum=1)
    covers_body = sec.boolean("proof_covers_body", True)
    gateways = sec.string_list("gateways")
    sec.done()
    if not 1.0 <= max_age <= 600.0:
        raise ConfigError(sec.at("proof_max_age"), "a duration from 1s to 10m", max_age)
    if not insecure and key is None:
        raise ConfigError(
            sec.at("org_public_key"), "the path of the org's Ed25519 public key (or insecure: true)"
        )
    if insecure and key is not None:
        raise ConfigError(sec.at("insecure"), "false when org_public_key is set (choose one)", True)
    if key is not None and not Path(key).is_file():
        raise ConfigError(sec.at("org_public_key"), "an existing PEM file", key)
    return AuthConfig(insecure=insecure, org_public_key=Path(key) if key else None, token_cache_size=cache,
                      proof_max_age_s=max_age, proof_ledger_size=ledger, proof_rate_per_agent=rate,
                      proof_covers_body=covers_body, gateways=gateways)


def _parse_chain(sec: _Section) -> ChainConfig:
    cfg = ChainConfig(
        quiet_period_s=sec.duration("quiet_period", 2.0),
        incomplete_after_s=sec.duration("incomplete_after", 300.0),
        max_buffered_spans=sec.integer("max_buffered_spans", 200_000, minimum=0),
        foreign_quiet_period_s=sec.duration("foreign_quiet_period", 5.0),
    )
    sec.done()
    if cfg.foreign_quiet_period_s <= 0:
        raise ConfigError(sec.at("foreign_quiet_period"), "a duration above 0", cfg.foreign_quiet_period_s)
    return cfg


def _parse_batch(sec: _Section) -> BatchConfig:
    size = sec.integer("send_batch_size", 8192, minimum=1)
    cfg = BatchConfig(
        timeout_s=sec.duration("timeout", 0.2),
        send_batch_size=size,
        send_batch_max_size=sec.integer("send_batch_max_size", max(65536, size), minimum=0),
        max_queued_spans=sec.integer("max_queued_spans", 262_144, minimum=1),
    )
    sec.done()
    if cfg.send_batch_max_size and cfg.send_batch_max_size < size:
        raise ConfigError(
            sec.at("send_batch_max_size"), f"0 or at least send_batch_size ({size})", cfg.send_batch_max_size
        )
    return cfg


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _parse_clickhouse(sec: _Section) -> ClickHouseConfig:
    endpoint = sec.string("endpoint")
    if endpoint is None:
        raise ConfigError(sec.at("endpoint"), "chdb://PATH or http(s)://HOST:PORT")
    if not re.match(r"(chdb://.+|https?://[^/\s]+)", endpoint):
        raise ConfigError(sec.at("endpoint"), "chdb://PATH or http(s)://HOST:PORT", endpoint)
    database = sec.string("database", "agentreplay")
    cluster = sec.string("cluster_name")
    for key, name in (("database", database), ("cluster_name", cluster)):
        if name is not None and not _IDENT.fullmatch(name):
            raise ConfigError(sec.at(key), "an identifier (letters, digits, _)", name)
    ttl = sec.duration("ttl", 0.0)
    cfg = ClickHouseConfig(
        endpoint=endpoint,
        database=database or "agentreplay",
        create_schema=sec.boolean("create_schema", True),
        ttl_s=int(ttl),
        cluster_name=cluster,
        username=sec.string("username"),
        password=sec.get("password") if sec.get("password") is None else str(sec.get("password")),
        timeout_s=sec.duration("timeout", 10.0),
    )
    sec.done()
    if cluster and endpoint.startswith("chdb://"):
        raise ConfigError(
            sec.at("cluster_name"), "no cluster with the embedded chdb:// store (use http(s)://)", cluster
        )
    return cfg


def _parse_control(sec: _Section) -> ControlConfig:
    cfg = ControlConfig(
        endpoint=sec.endpoint("endpoint", ControlConfig.endpoint),
        insecure=sec.boolean("insecure", False),
        tls=_parse_server_tls(sec),
    )
    sec.done()
    return cfg


def _parse_server_tls(parent: _Section, *, grpc: bool = False) -> ServerTls | None:
    """A listener's ``tls`` (otelcol's server settings): ``cert_file`` and ``key_file``, ``client_ca_file``
    for mutual TLS, ``min_version``; each file loaded now, so that one that does not stops the start, named.
    Absent or empty: plaintext."""
    if parent.get("tls") is None:
        return None
    sec = parent.section("tls")
    cert, key, client_ca = sec.string("cert_file"), sec.string("key_file"), sec.string("client_ca_file")
    version = sec.get("min_version")
    sec.done()
    if cert is None or key is None:
        raise ConfigError(sec.at("cert_file" if cert is None else "key_file"),
                          "cert_file and key_file together: the listener's certificate and its private key (PEM)")
    if version is not None and (isinstance(version, bool) or str(version) not in ("1.0", "1.1", "1.2", "1.3")):
        raise ConfigError(sec.at("min_version"), '"1.2" or "1.3"', version)
    tls = ServerTls(cert_file=Path(cert), key_file=Path(key), client_ca_file=Path(client_ca) if client_ca else None,
                    min_version=DEFAULT_MIN_VERSION if version is None else str(version))
    try:
        check_server_tls(tls, grpc=grpc)
    except TlsFileError as exc:
        raise ConfigError(sec.at(exc.key), str(exc)) from None
    return tls


def _parse_scope(sec: _Section) -> ScopeConfig:
    manifests = sec.string("manifests_dir")
    tiers = sec.string("trust_tiers")
    hooks = sec.string_list("webhooks")
    for i, url in enumerate(hooks):
        if not re.match(r"https?://[^/\s]+", url):
            raise ConfigError(f"{sec.at('webhooks')}[{i}]", "an http(s):// URL", url)
    raw_token = sec.get("admin_token")  # may be empty (an unset env var): admin operations are then off
    if raw_token is not None and not isinstance(raw_token, str):
        raise ConfigError(sec.at("admin_token"), "a string (empty turns admin operations off)", raw_token)
    token = raw_token or None
    token_file = sec.string("admin_token_file")
    if token_file is not None:
        if token is not None:
            raise ConfigError(sec.at("admin_token_file"), "admin_token or admin_token_file, not both", token_file)
        token = _read_token(sec.at("admin_token_file"), Path(token_file))
    cfg = ScopeConfig(
        require_manifests=sec.boolean("require_manifests", False),
        manifests_dir=Path(manifests) if manifests else None,
        admin_token=token or None,
        admin_token_file=Path(token_file) if token_file else None,
        webhooks=hooks,
        webhook_retries=sec.integer("webhook_retries", 5, minimum=0, maximum=20),
        webhook_timeout_s=sec.duration("webhook_timeout", 5.0),
        trust_tiers=Path(tiers) if tiers else None,
        trust_refresh_s=sec.duration("trust_refresh", 60.0),
    )
    sec.done()
    if cfg.manifests_dir is not None and not cfg.manifests_dir.is_dir():
        raise ConfigError(sec.at("manifests_dir"), "an existing directory of signed manifests", manifests)
    if cfg.trust_tiers is not None and not cfg.trust_tiers.is_file():
        raise ConfigError(sec.at("trust_tiers"), "an existing trust tier table (JSON)", tiers)
    return cfg


def _read_token(key: str, path: Path) -> str:
    """The admin token a file holds (its first line): a secret kept out of the config itself."""
    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise ConfigError(key, f"a readable file holding the admin token ({exc.strerror})", str(path)) from exc
    if not token or "\n" in token:
        raise ConfigError(key, "a file holding the admin token on one line", str(path))
    return token


def _parse_transparency(sec: _Section) -> TransparencyConfig:
    paths: dict[str, Path] = {}
    for key, what in (("signing_key", "the log's Ed25519 private key (PEM)"),
                      ("certificate", "the org's certificate of the log key (JSON)")):
        value = sec.string(key)
        if value is None or not Path(value).is_file():
            raise ConfigError(sec.at(key), f"an existing file: {what}", value)
        paths[key] = Path(value)
    cfg = TransparencyConfig(
        signing_key=paths["signing_key"],
        certificate=paths["certificate"],
        checkpoint_interval_s=sec.duration("checkpoint_interval", 10.0),
        checkpoint_refresh_s=sec.duration("checkpoint_refresh", 3600.0),
    )
    sec.done()
    if cfg.checkpoint_interval_s <= 0:
        raise ConfigError(sec.at("checkpoint_interval"), "a duration above 0", cfg.checkpoint_interval_s)
    return cfg


_RECEIVERS = {"otlp": _parse_otlp}
_PROCESSORS = {
    "agentreplay_auth": _parse_auth,
    "agentreplay_chain": _parse_chain,
    "agentreplay_scope": _parse_scope,
    "batch": _parse_batch,
}


def _parse_nop(sec: _Section) -> str:
    """``nop``: acknowledge and drop (as otelcol's nop exporter): measures the receive ceiling."""
    sec.done()
    return "nop"


def _parse_forward_otlp(sec: _Section) -> ForwardConfig:
    return _parse_forward(sec, "otlp")


def _parse_forward_otlphttp(sec: _Section) -> ForwardConfig:
    return _parse_forward(sec, "otlphttp")


_URL = re.compile(r"https?://[^/\s:]+(:\d{1,5})?(/\S*)?")


def _parse_forward(sec: _Section, kind: str) -> ForwardConfig:
    """``otlp`` / ``otlphttp``: otelcol's settings where they apply (endpoint, headers, tls, timeout,
    compression, sending_queue, retry_on_failure); any other key is refused, named."""
    endpoint = sec.string("endpoint")
    urls: dict[str, str] = {}
    tls_sec = sec.section("tls")
    tls = TlsSettings(
        insecure=tls_sec.boolean("insecure", False),
        ca_file=_file(tls_sec, "ca_file"),
        cert_file=_file(tls_sec, "cert_file"),
        key_file=_file(tls_sec, "key_file"),
        insecure_skip_verify=tls_sec.boolean("insecure_skip_verify", False) if kind == "otlphttp" else False,
    )
    tls_sec.done()
    if (tls.cert_file is None) != (tls.key_file is None):
        raise ConfigError(tls_sec.at("cert_file" if tls.cert_file is None else "key_file"),
                          "cert_file and key_file together (mutual TLS), or neither")
    if kind == "otlp":
        if endpoint is None:
            raise ConfigError(sec.at("endpoint"), "host:port of an OTLP/gRPC receiver (e.g. jaeger:4317)")
        scheme, _, rest = endpoint.rpartition("://")
        if scheme not in ("", "http", "https") or parse_endpoint(rest) is None:
            raise ConfigError(sec.at("endpoint"), "host:port of an OTLP/gRPC receiver (e.g. jaeger:4317)", endpoint)
        if scheme == "http":  # otelcol: an http:// endpoint is plaintext, https:// is TLS
            tls = replace(tls, insecure=True)
        elif scheme == "https":
            tls = replace(tls, insecure=False)
        endpoint = rest
    else:
        for signal in SIGNALS:
            url = sec.string(f"{signal}_endpoint")
            if url is not None and not _URL.fullmatch(url):
                raise ConfigError(sec.at(f"{signal}_endpoint"), "an http(s):// URL", url)
            if url is None and endpoint is not None:
                url = endpoint.rstrip("/") + f"/v1/{signal}"
            if url is not None:
                urls[signal] = url
        if endpoint is not None and not _URL.fullmatch(endpoint):
            raise ConfigError(sec.at("endpoint"), "the http(s):// URL of an OTLP/HTTP receiver", endpoint)
        if endpoint is None and not urls:
            raise ConfigError(sec.at("endpoint"), "the http(s):// URL of an OTLP/HTTP receiver (e.g. http://tempo:4318)")
        endpoint = endpoint or next(iter(urls.values()))
    headers = sec.get("headers") or {}
    if not isinstance(headers, dict) or not all(
        isinstance(k, str) and k and isinstance(v, str | int | float) and not isinstance(v, bool)
        for k, v in headers.items()
    ):
        raise ConfigError(sec.at("headers"), "a mapping of header names to values", "<headers>")
    compression = sec.get("compression")
    compression = "gzip" if compression is None else compression
    if compression not in ("gzip", "none", ""):
        raise ConfigError(sec.at("compression"), "gzip or none", compression)
    q = sec.section("sending_queue")
    if not q.boolean("enabled", True):
        raise ConfigError(q.at("enabled"), "true: forwarding always goes through the queue, never holding up a receiver", False)
    queue = QueueSettings(
        num_consumers=q.integer("num_consumers", 10, minimum=1, maximum=128),
        queue_size=q.integer("queue_size", 1000, minimum=1, maximum=1_000_000),
    )
    q.done()
    auth = sec.section("auth")
    authenticator = auth.string("authenticator")
    auth.done()
    r = sec.section("retry_on_failure")
    retry = RetrySettings(
        enabled=r.boolean("enabled", True),
        initial_interval_s=r.duration("initial_interval", 5.0),
        randomization_factor=_number(r, "randomization_factor", 0.5, maximum=1.0),
        multiplier=_number(r, "multiplier", 1.5, minimum=1.0, maximum=100.0),
        max_interval_s=r.duration("max_interval", 30.0),
        max_elapsed_time_s=r.duration("max_elapsed_time", 300.0),
    )
    r.done()
    if retry.enabled and retry.initial_interval_s <= 0:
        raise ConfigError(r.at("initial_interval"), "a duration above 0", retry.initial_interval_s)
    cfg = ForwardConfig(
        name=kind,
        kind=kind,
        endpoint=endpoint,
        urls=urls,
        headers={str(k).lower(): str(v) for k, v in headers.items()},
        tls=tls,
        timeout_s=sec.duration("timeout", 5.0 if kind == "otlp" else 30.0),
        compression=compression or "none",
        queue=queue,
        retry=retry,
        authenticator=authenticator,
    )
    sec.done()
    if cfg.timeout_s <= 0:
        raise ConfigError(sec.at("timeout"), "a duration above 0", cfg.timeout_s)
    return cfg


def _file(sec: _Section, key: str) -> Path | None:
    value = sec.string(key)
    if value is not None and not Path(value).is_file():
        raise ConfigError(sec.at(key), "an existing PEM file", value)
    return Path(value) if value else None


def _number(sec: _Section, key: str, default: float, *, minimum: float = 0.0, maximum: float) -> float:
    value = sec.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not minimum <= value <= maximum:
        raise ConfigError(sec.at(key), f"a number between {minimum:g} and {maximum:g}", value)
    return float(value)


_EXPORTERS = {
    "clickhouse": _parse_clickhouse,
    "nop": _parse_nop,
    "otlp": _parse_forward_otlp,
    "otlphttp": _parse_forward_otlphttp,
}
def _parse_headers_setter(sec: _Section) -> HeadersSetter:
    rules = sec.get("headers")
    if not isinstance(rules, list) or not rules:
        raise ConfigError(sec.at("headers"), "a list of {key, value} or {key, from_context: authorization}", rules)
    values: dict[str, str] = {}
    from_request: list[str] = []
    for i, raw in enumerate(rules):
        rule = _Section(f"{sec.at('headers')}[{i}]", raw)
        key, value, context = rule.string("key"), rule.get("value"), rule.get("from_context")
        action = rule.string("action", "upsert")
        rule.done()
        if key is None:
            raise ConfigError(rule.at("key"), "a header name")
        if action not in ("insert", "update", "upsert"):
            raise ConfigError(rule.at("action"), "insert, update or upsert", action)
        if (value is None) == (context is None):
            raise ConfigError(rule.path, "value or from_context (one of them)")
        if context is not None:
            if str(context).lower() != "authorization":
                raise ConfigError(rule.at("from_context"),
                                  "authorization (the one request header the collector keeps)", context)
            from_request.append(key.lower())
        else:
            values[key.lower()] = str(value)
    sec.done()
    return HeadersSetter(values=values, from_request=tuple(from_request))


def _parse_identity(sec: _Section) -> ForwardIdentity:
    identity, key = _file(sec, "identity_file"), _file(sec, "key_file")
    sec.done()
    for name, value in (("identity_file", identity), ("key_file", key)):
        if value is None:
            raise ConfigError(sec.at(name), "the path of the gateway's identity token and of its key (both)")
    assert identity is not None and key is not None
    return ForwardIdentity(name=sec.path.rsplit(".", 1)[-1], identity_file=identity, key_file=key)


_EXTENSIONS = {
    "agentreplay_identity": _parse_identity,
    "agentreplay_control": _parse_control,
    "agentreplay_transparency": _parse_transparency,
    "headers_setter": _parse_headers_setter,
}


def _components(root: _Section, kind: str, parsers: Mapping[str, Any]) -> dict[str, Any]:
    """Each component of one section, parsed; a type this collector does not have (a config
    written for otelcol-contrib: ``jaeger``, ``kafka``, ``health_check``) is refused, named."""
    sec = root.section(kind)
    out: dict[str, Any] = {}
    for component_id in list(sec.raw):
        ctype = _component_type(str(component_id))
        if ctype not in parsers:
            raise ConfigError(
                sec.at(str(component_id)),
                f"a {kind[:-1]} type this collector has, one of {sorted(parsers)}; {ctype!r} is not one"
                " (an otelcol-contrib component: run it in an otelcol in front of this collector)",
            )
        out[str(component_id)] = parsers[ctype](sec.section(str(component_id)))
    return out


def parse_config(raw: Any, environ: Mapping[str, str] | None = None, *, strict: bool = True) -> CollectorConfig:
    """Validate a parsed YAML document into a :class:`CollectorConfig` (or raise ConfigError).

    ``strict`` (what the collector starts with) also refuses an endpoint exposed without
    authentication and a key or token file others may open; a checker that lists every insecure
    setting at once (``agentreplay init --validate``) parses with it off and judges those itself.
    """
    env = os.environ if environ is None else environ
    doc = substitute(raw, "", env)
    root = _Section("", doc)
    receivers = _components(root, "receivers", _RECEIVERS)
    processors = _components(root, "processors", _PROCESSORS)
    exporters = _components(root, "exporters", _EXPORTERS)
    extensions = _components(root, "extensions", _EXTENSIONS)
    service = root.section("service")
    ext_ids = service.string_list("extensions")
    for i, ext in enumerate(ext_ids):
        if ext not in extensions:
            raise ConfigError(
                f"{service.at('extensions')}[{i}]",
                f"an extension defined under extensions {sorted(extensions)}",
                ext,
            )
    telemetry = service.section("telemetry")
    logs = telemetry.section("logs")
    level = logs.string("level", "info") or "info"
    if level.lower() not in ("debug", "info", "warn", "warning", "error"):
        raise ConfigError(logs.at("level"), "one of debug, info, warn, error", level)
    logs.done()
    telemetry.done()
    declared = _parse_pipelines(service.section("pipelines"))
    service.done()
    root.done()
    for sec, p in declared:
        _check_pipeline(sec, p, receivers, processors, exporters)
    _check_pipelines(declared)
    pipeline = _local_pipeline([p for _, p in declared], "traces") or declared[0][1]

    def used(table: dict[str, Any], ids: tuple[str, ...], ctype: str) -> Any:
        return next((table[i] for i in ids if _component_type(i) == ctype), None)

    pipelines = tuple(p for _, p in declared)
    auth_id = next((c for p in pipelines for c in p.processors if _component_type(c) == "agentreplay_auth"), None)
    forwards = {
        signal: tuple(e for p in pipelines if p.signal == signal for e in p.exporters
                      if _component_type(e) in FORWARD_EXPORTERS)
        for signal in SIGNALS
    }

    control = next((extensions[e] for e in ext_ids if _component_type(e) == "agentreplay_control"), None)
    config = CollectorConfig(
        otlp=used(receivers, pipeline.receivers, "otlp"),
        auth=processors[auth_id] if auth_id else None,
        chain=used(processors, pipeline.processors, "agentreplay_chain"),
        batch=used(processors, pipeline.processors, "batch") or BatchConfig(),
        clickhouse=used(exporters, pipeline.exporters, "clickhouse"),
        control=control,
        pipeline=pipeline,
        log_level="warning" if level.lower() == "warn" else level.lower(),
        scope=used(processors, pipeline.processors, "agentreplay_scope"),
        transparency=next((extensions[e] for e in ext_ids if _component_type(e) == "agentreplay_transparency"), None),
        pipelines=pipelines,
        stored_signals=_stored_signals(pipelines),
        forwarders={e: _authenticated(exporters[e], e, extensions, ext_ids) for ids in forwards.values() for e in ids},
        forwards={signal: ids for signal, ids in forwards.items() if ids},
    )
    _check_metadata(config, pipeline)
    config = replace(config, secret_files=_secret_files(config, pipeline, ext_ids))
    if strict:
        _check_exposure(config, pipeline, ext_ids)
        _check_secret_files(config)
    config = replace(config, analysis=_with_org_key(config, next(
        (extensions[e] for e in ext_ids if _component_type(e) == "agentreplay_analysis"), None)))
    _check_transparency(config, ext_ids)
    return replace(config, memory=_check_memory(config, extensions, ext_ids))


def _secret_files(config: CollectorConfig, p: TracesPipeline, ext_ids: tuple[str, ...]) -> tuple[SecretFile, ...]:
    files: list[SecretFile] = []
    if config.transparency is not None:
        ext = next(e for e in ext_ids if _component_type(e) == "agentreplay_transparency")
        files.append(SecretFile(key=f"extensions.{ext}.signing_key", path=config.transparency.signing_key))
    if config.scope is not None and config.scope.admin_token_file is not None:
        proc = next(c for c in p.processors if _component_type(c) == "agentreplay_scope")
        files.append(SecretFile(key=f"processors.{proc}.admin_token_file", path=config.scope.admin_token_file))
    for forwarder in config.forwarders.values():
        if forwarder.identity is not None and all(f.path != forwarder.identity.key_file for f in files):
            files.append(SecretFile(key=f"extensions.{forwarder.identity.name}.key_file",
                                    path=forwarder.identity.key_file))
    for key, tls in tls_listeners(config, p, ext_ids):
        if tls is not None and all(f.path != tls.key_file for f in files):  # one key may serve every listener
            files.append(SecretFile(key=f"{key}.tls.key_file", path=tls.key_file))
    return tuple(files)


def tls_listeners(
    config: CollectorConfig, p: TracesPipeline | None = None, ext_ids: tuple[str, ...] = ()
) -> list[tuple[str, ServerTls | None]]:
    """Each listener's dotted key and its ``tls`` (None: plaintext), in the order of the file."""
    p = p or config.pipeline
    otlp_id = next((r for r in p.receivers if _component_type(r) == "otlp"), "otlp")
    control_id = next((e for e in ext_ids if _component_type(e) == "agentreplay_control"), "agentreplay_control")
    found: list[tuple[str, ServerTls | None]] = []
    for name, receiver in (("grpc", config.otlp.grpc), ("http", config.otlp.http)):
        if receiver is not None:
            found.append((f"receivers.{otlp_id}.protocols.{name}", receiver.tls))
    if config.control is not None:
        found.append((f"extensions.{control_id}", config.control.tls))
    return found


def open_to_others(path: Path) -> int | None:
    """The file's permission bits if its group or others may open it at all, else None.

    A private key or token that others can read is no longer the owner's; one they can write,
    they can replace. ``ssh`` refuses such key files for the same reason.
    """
    if os.name != "posix":
        return None
    try:
        mode = path.stat().st_mode & 0o777
    except OSError:
        return None
    return mode if mode & 0o077 else None


def _check_secret_files(config: CollectorConfig) -> None:
    """The collector refuses to start with a key or token file others may open, naming it."""
    for secret in config.secret_files:
        mode = open_to_others(secret.path)
        if mode is not None:
            raise ConfigError(
                secret.key, f"{secret.path} to be open to its owner only: it is mode {mode:04o} (chmod 600 it)"
            )


def _check_transparency(config: CollectorConfig, ext_ids: tuple[str, ...]) -> None:
    """The log key loads, its certificate names it, and (given the org key) the org signed it."""
    cfg = config.transparency
    if cfg is None:
        return
    path = "extensions." + next(e for e in ext_ids if _component_type(e) == "agentreplay_transparency")
    try:
        key = load_private_key(cfg.signing_key)
    except IdentityError as exc:
        raise ConfigError(f"{path}.signing_key", f"an Ed25519 private key (PEM): {exc}") from exc
    try:
        certificate = json.loads(cfg.certificate.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}.certificate", f"the org's certificate of the log key (JSON): {exc}") from exc
    body = certificate.get("certificate") if isinstance(certificate, dict) else None
    if not isinstance(body, dict) or body.get("kid") != key_id(key):
        raise ConfigError(f"{path}.certificate", f"the org's certificate of the signing key {key_id(key)}")
    org = config.auth.org_public_key if config.auth is not None else None
    if org is not None:
        try:
            verify_log_certificate(certificate, load_public_key(org))
        except IdentityError as exc:
            raise ConfigError(f"{path}.certificate", f"a certificate the org key signed: {exc}") from exc


def _check_exposure(config: CollectorConfig, p: TracesPipeline, ext_ids: tuple[str, ...]) -> None:
    """No endpoint off loopback without authentication: the collector refuses to start, naming it.

    Exports off loopback need ``agentreplay_auth`` with an org key; the control endpoint off
    loopback needs that too (Authorize and Watch trust the agent's token) and token-checked reads.
    """
    authenticated = config.auth is not None and not config.auth.insecure
    why = "agentreplay_auth with org_public_key (exports are not authenticated)"
    otlp_id = next((r for r in p.receivers if _component_type(r) == "otlp"), "otlp")
    for name, receiver in (("grpc", config.otlp.grpc), ("http", config.otlp.http)):
        if receiver is not None and not receiver.endpoint.is_loopback and not authenticated:
            path = f"receivers.{otlp_id}.protocols.{name}.endpoint"
            raise ConfigError(path, f"a loopback address, or {why}", str(receiver.endpoint))
    control, control_id = config.control, next(
        (e for e in ext_ids if _component_type(e) == "agentreplay_control"), "agentreplay_control"
    )
    if control is None or control.endpoint.is_loopback:
        return
    path = f"extensions.{control_id}"
    if control.insecure:
        raise ConfigError(f"{path}.insecure", "false off loopback (reads would need no token)", True)
    if config.scope is not None and not authenticated:
        raise ConfigError(f"{path}.endpoint", f"a loopback address, or {why}", str(control.endpoint))


def _parse_pipelines(sec: _Section) -> list[tuple[_Section, PipelineConfig]]:
    """``service.pipelines``: ``traces``, ``metrics``, ``logs``, and named ones (``traces/forward``)."""
    out: list[tuple[_Section, PipelineConfig]] = []
    for key in list(sec.raw):
        name = str(key)
        signal, slash, suffix = name.partition("/")
        if signal not in SIGNALS or (slash and not suffix):
            raise ConfigError(
                sec.at(name), "a pipeline named traces, metrics or logs, or one of them /NAME (traces/forward)"
            )
        p = sec.section(name)
        out.append((p, PipelineConfig(
            name=name,
            signal=signal,
            receivers=p.string_list("receivers"),
            processors=p.string_list("processors"),
            exporters=p.string_list("exporters"),
        )))
        p.done()
    sec.done()
    if not any(p.signal == "traces" for _, p in out):
        raise ConfigError(sec.at("traces"), "a traces pipeline")
    return out


def _check_pipeline(
    sec: _Section, p: PipelineConfig, receivers: dict, processors: dict, exporters: dict
) -> None:
    """One pipeline alone: its components defined, its processors its signal's, in order; at most
    one local exporter (clickhouse or nop) beside any number of forwarding ones."""
    for key, ids, defined in (
        ("receivers", p.receivers, receivers),
        ("processors", p.processors, processors),
        ("exporters", p.exporters, exporters),
    ):
        for i, cid in enumerate(ids):
            if cid not in defined:
                raise ConfigError(
                    f"{sec.at(key)}[{i}]", f"a component defined under {key} {sorted(defined)}", cid
                )
        if len(set(ids)) != len(ids):
            raise ConfigError(sec.at(key), f"each {key[:-1]} at most once", list(ids))
        types = [_component_type(c) for c in ids if key != "exporters"]
        if len(set(types)) != len(types):
            raise ConfigError(sec.at(key), f"each {key[:-1]} type at most once", list(ids))
    if not p.receivers:
        raise ConfigError(sec.at("receivers"), "at least one receiver (otlp)")
    local = [e for e in p.exporters if _component_type(e) in LOCAL_EXPORTERS]
    if not p.exporters or len(local) > 1:
        raise ConfigError(
            sec.at("exporters"),
            "one exporter or more: at most one of clickhouse, nop (the local store, or none), and any"
            " number of otlp, otlphttp (forwarding)",
            list(p.exporters),
        )
    allowed = SIGNAL_PROCESSORS[p.signal]
    for i, cid in enumerate(p.processors):
        if _component_type(cid) not in allowed:
            raise ConfigError(
                f"{sec.at('processors')}[{i}]", f"a processor a {p.signal} pipeline runs, one of {list(allowed)}", cid
            )
        if _component_type(cid) in ("agentreplay_chain", "agentreplay_scope") and (
            not local or _component_type(local[0]) != "clickhouse"
        ):
            raise ConfigError(
                f"{sec.at('processors')}[{i}]",
                "the clickhouse exporter in the same pipeline (it judges the spans the store keeps)",
                cid,
            )
    if local and _component_type(local[0]) == "nop" and any(
        _component_type(c) != "agentreplay_auth" for c in p.processors
    ):
        raise ConfigError(
            sec.at("processors"),
            "no processors but agentreplay_auth with the nop exporter (it checks and drops)",
            list(p.processors),
        )
    ranks = [allowed.index(_component_type(c)) for c in p.processors]
    if ranks != sorted(ranks):
        raise ConfigError(
            sec.at("processors"), f"processors in the order {list(allowed)}", list(p.processors)
        )


def _check_pipelines(declared: list[tuple[_Section, PipelineConfig]]) -> None:
    """The pipelines together. The collector runs one otlp receiver, checks one token per export
    for every pipeline it feeds, and keeps one store; a forwarding exporter gets each export once."""
    first_sec, first = declared[0]
    def auth(p: PipelineConfig) -> str | None:
        return next((c for c in p.processors if _component_type(c) == "agentreplay_auth"), None)

    local_by_signal: dict[str, str] = {}
    forwarded: dict[tuple[str, str], str] = {}
    stores = {e for _, p in declared for e in p.exporters if _component_type(e) == "clickhouse"}
    for sec, p in declared:
        if p.receivers != first.receivers:
            raise ConfigError(
                sec.at("receivers"),
                f"the receivers of every pipeline alike, {list(first.receivers)} (one otlp receiver feeds them all)",
                list(p.receivers),
            )
        if auth(p) != auth(first):
            raise ConfigError(
                sec.at("processors"),
                "the same agentreplay_auth in every pipeline or in none (the receiver checks one token"
                " for every pipeline an export feeds)",
                list(p.processors),
            )
        if len(stores) > 1:
            raise ConfigError(sec.at("exporters"), f"one clickhouse exporter for all pipelines, not {sorted(stores)}")
        local = [e for e in p.exporters if _component_type(e) in LOCAL_EXPORTERS]
        if local and p.signal in local_by_signal:
            raise ConfigError(
                sec.at("exporters"),
                f"clickhouse or nop in one {p.signal} pipeline only ({local_by_signal[p.signal]} has it already)",
                list(p.exporters),
            )
        if local:
            local_by_signal[p.signal] = p.name
        for e in p.exporters:
            if _component_type(e) in FORWARD_EXPORTERS:
                if (p.signal, e) in forwarded:
                    raise ConfigError(
                        sec.at("exporters"),
                        f"{e} in one {p.signal} pipeline only ({forwarded[(p.signal, e)]} has it: it would"
                        " send each export twice)",
                        list(p.exporters),
                    )
                forwarded[(p.signal, e)] = p.name
    if stores and not any(
        p.signal == "traces" and any(_component_type(e) == "clickhouse" for e in p.exporters) for _, p in declared
    ):
        raise ConfigError(
            "service.pipelines.traces.exporters",
            "clickhouse in a traces pipeline too, when a metrics or logs pipeline stores (one store, opened with"
            " the traces)",
        )


def _authenticated(cfg: ForwardConfig, cid: str, extensions: dict[str, Any], ext_ids: tuple[str, ...]) -> ForwardConfig:
    """The exporter with its ``auth.authenticator``'s headers (a headers_setter in service.extensions)."""
    cfg = replace(cfg, name=cid)
    if cfg.authenticator is None:
        return cfg
    setter = extensions.get(cfg.authenticator)
    if isinstance(setter, ForwardIdentity) and cfg.authenticator in ext_ids:
        return replace(cfg, identity=setter)
    if not isinstance(setter, HeadersSetter) or cfg.authenticator not in ext_ids:
        raise ConfigError(f"exporters.{cid}.auth.authenticator",
                          "a headers_setter or agentreplay_identity extension listed in service.extensions",
                          cfg.authenticator)
    return replace(cfg, headers={**cfg.headers, **setter.values}, from_request=setter.from_request)


def _check_metadata(config: CollectorConfig, p: PipelineConfig) -> None:
    """A token passed on (``from_context``) needs the receiver to keep it: ``include_metadata``, as in otelcol."""
    users = [f for f in config.forwarders.values() if f.from_request]
    otlp_id = p.receivers[0]
    for name, receiver in (("grpc", config.otlp.grpc), ("http", config.otlp.http)):
        if users and receiver is not None and not receiver.include_metadata:
            raise ConfigError(f"receivers.{otlp_id}.protocols.{name}.include_metadata",
                              f"true: {users[0].name} passes on each export's authorization (from_context)", False)


def _local_pipeline(pipelines: list[PipelineConfig], signal: str) -> PipelineConfig | None:
    return next(
        (p for p in pipelines if p.signal == signal and any(_component_type(e) in LOCAL_EXPORTERS for e in p.exporters)),
        None,
    )


def _stored_signals(pipelines: tuple[PipelineConfig, ...]) -> frozenset[str]:
    """The signals the store keeps: those whose pipelines hold clickhouse. A signal with no pipeline
    at all (metrics or logs in a config that declares traces only) is kept as the traces are."""
    stored = set()
    for signal in SIGNALS:
        mine = [p for p in pipelines if p.signal == signal]
        source = mine or [p for p in pipelines if p.signal == "traces"]
        if any(_component_type(e) == "clickhouse" for p in source for e in p.exporters):
            stored.add(signal)
    return frozenset(stored)


def load_config(path: str | Path, environ: Mapping[str, str] | None = None, *, strict: bool = True) -> CollectorConfig:
    """Read, substitute and validate a config file (``strict``: as :func:`parse_config`)."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError("", f"a readable config file at {path} ({exc.strerror})") from exc
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError("", f"valid YAML ({exc})") from exc
    return parse_config(raw, environ, strict=strict)


# --- agentreplay_analysis: the failure-analysis worker (agentreplay_collector.analysis) -------------
def _parse_analysis(sec: _Section) -> AnalysisConfig:
    judge = None
    if sec.has("judge") and sec.get("judge") is not None:
        j = sec.section("judge")
        base_url, model, api_key = (_text(j, key) for key in ("base_url", "model", "api_key"))
        timeout_s = j.duration("timeout", 120.0)
        context_tokens = j.integer("context_tokens", 16_384, minimum=1024)
        provider, method = _text(j, "provider"), _text(j, "method")  # "": $AGENTREPLAY_ANALYSIS_*, else default
        for key, value, allowed in (("provider", provider, JUDGE_PROVIDERS), ("method", method, JUDGE_METHODS)):
            if value and value not in allowed:
                raise ConfigError(j.at(key), f"one of {', '.join(allowed)}", value)
        budget_tokens = j.integer("budget_tokens", 0, minimum=1) if j.has("budget_tokens") else None
        budget_s = j.duration("budget", 0.0) if j.has("budget") else None
        if budget_s is not None and budget_s <= 0:
            raise ConfigError(j.at("budget"), "a duration above 0", budget_s)
        j.done()
        if bool(base_url) != bool(model):  # both empty (unset env vars): no judge
            raise ConfigError(j.at("model" if base_url else "base_url"),
                              "a value too: a judge needs both base_url and model", None)
        if base_url:
            judge = JudgeSettings(base_url=base_url, model=model, api_key=api_key, timeout_s=timeout_s,
                                  context_tokens=context_tokens, provider=provider, method=method,
                                  budget_tokens=budget_tokens, budget_s=budget_s)
    incidents = None
    if sec.has("incidents") and sec.get("incidents") is not None:
        i = sec.section("incidents")
        folder = i.string("dir")
        kept = IncidentCaps()
        caps = IncidentCaps(
            max_per_agent=i.integer("max_per_agent", kept.max_per_agent, minimum=1),
            max_bytes_per_agent=_size(i, "max_bytes_per_agent", kept.max_bytes_per_agent),
            max_total=i.integer("max_total", kept.max_total, minimum=1),
            max_bytes_total=_size(i, "max_bytes_total", kept.max_bytes_total))
        i.done()
        if not folder:
            raise ConfigError(i.at("dir"), "the folder halted runs' incidents are written under", folder)
        incidents = IncidentSettings(dir=Path(folder), caps=caps)
    cfg = AnalysisConfig(analyzer=sec.string("analyzer", "detectors") or "detectors",
                         poll_interval_s=sec.duration("poll_interval", 2.0),
                         batch=sec.integer("batch", 100, minimum=1, maximum=100_000), judge=judge,
                         incidents=incidents)
    sec.done()
    if cfg.poll_interval_s <= 0:
        raise ConfigError(sec.at("poll_interval"), "a duration above 0", cfg.poll_interval_s)
    return cfg


def _with_org_key(config: CollectorConfig, analysis: AnalysisConfig | None) -> AnalysisConfig | None:
    """Incidents check each case against the org key: the one ``agentreplay_auth`` holds."""
    if analysis is None or analysis.incidents is None:
        return analysis
    org = config.auth.org_public_key if config.auth is not None else None
    if org is None:
        raise ConfigError("extensions.agentreplay_analysis.incidents",
                          "agentreplay_auth with org_public_key too (each incident's case is checked against it)")
    return replace(analysis, incidents=replace(analysis.incidents, org_public_key=org))


_SIZE_UNITS = {"": 1, "b": 1, "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4}


def _size(sec: _Section, key: str, default: int) -> int:
    """A number of bytes: an integer, or a string like ``512KiB``, ``256MiB``, ``2GiB``; at least 1."""
    value = sec.get(key)
    if value is None:
        return default
    found = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", value) if isinstance(value, str) else None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    if found and found.group(2).lower() in _SIZE_UNITS and int(found.group(1)) >= 1:
        return int(found.group(1)) * _SIZE_UNITS[found.group(2).lower()]
    raise ConfigError(sec.at(key), "a size of at least 1 byte: an integer, or like 512KiB, 256MiB, 2GiB", value)


def _text(sec: _Section, key: str) -> str:
    """A string that may be empty (``${env:VAR:-}`` of an unset variable): "" means not set."""
    value = sec.get(key)
    if value is not None and not isinstance(value, str):
        raise ConfigError(sec.at(key), "a string", value)
    return value or ""


_EXTENSIONS["agentreplay_analysis"] = _parse_analysis


# --- agentreplay_memory: the one memory budget (agentreplay_collector.budget) ------------------------------
def _parse_memory(sec: _Section) -> MemoryConfig:
    """``limit``: bytes (an integer, or like 512MiB, 2GiB), or a share of the machine's memory (``25%``)."""
    value = sec.get("limit")
    sec.done()
    if value is None:
        return MemoryConfig(limit=budget.default_limit(), configured=False)
    if isinstance(value, str) and value.strip().endswith("%"):
        number = value.strip()[:-1].strip()
        machine = budget.machine_memory()
        if not re.fullmatch(r"\d+(\.\d+)?", number) or not 0 < float(number) <= 90:
            raise ConfigError(sec.at("limit"), "a share of the machine's memory between 0% and 90% (like 25%)", value)
        if not machine:
            raise ConfigError(sec.at("limit"), "a size in bytes: this machine's memory is not known", value)
        return MemoryConfig(limit=int(machine * float(number) / 100), configured=True)
    return MemoryConfig(limit=_size(sec, "limit", 0), configured=True)


def _check_memory(config: CollectorConfig, extensions: dict[str, Any], ext_ids: tuple[str, ...]) -> MemoryConfig:
    """The budget: configured (listed in service.extensions) or the default; large enough that the exports'
    share holds the largest export a receiver takes as it is parsed and converted."""
    ids = [e for e in extensions if _component_type(e) == "agentreplay_memory"]
    listed = [e for e in ext_ids if _component_type(e) == "agentreplay_memory"]
    if ids and not listed:
        raise ConfigError(f"extensions.{ids[0]}", "listed in service.extensions too, to take effect (the memory"
                          " budget is never left out quietly)")
    largest, where = 0, ""
    otlp_id = config.pipeline.receivers[0] if config.pipeline.receivers else "otlp"
    if config.otlp is not None and config.otlp.grpc is not None:
        largest, where = (config.otlp.grpc.max_recv_msg_size_mib * MIB,
                          f"receivers.{otlp_id}.protocols.grpc.max_recv_msg_size_mib")
    if config.otlp is not None and config.otlp.http is not None and config.otlp.http.max_request_body_size > largest:
        largest, where = (config.otlp.http.max_request_body_size,
                          f"receivers.{otlp_id}.protocols.http.max_request_body_size")
    needed = max(budget.MIN_LIMIT, math.ceil(largest * budget.EXPANSION / budget.SHARES[budget.EXPORTS]))
    if not listed:
        return MemoryConfig(limit=max(budget.default_limit(), needed), configured=False)
    memory = extensions[listed[0]]
    assert isinstance(memory, MemoryConfig)
    if not memory.configured:  # listed without a limit: the default, as large as the receivers need
        return replace(memory, limit=max(memory.limit, needed))
    if memory.limit < needed:
        why = (f"; the exports' share ({budget.SHARES[budget.EXPORTS]:.0%}) must hold the largest export a receiver"
               f" takes ({_mib(largest)} MiB, {where}) {budget.EXPANSION} times over, as it is parsed and converted"
               if needed > budget.MIN_LIMIT else "")
        raise ConfigError(f"extensions.{listed[0]}.limit", f"at least {_mib(needed)} MiB{why}",
                          f"{_mib(memory.limit)} MiB")
    return memory


def _mib(nbytes: int) -> str:
    return f"{nbytes / MIB:g}"


_EXTENSIONS["agentreplay_memory"] = _parse_memory
