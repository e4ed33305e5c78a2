"""``agentreplay init``: a collector set-up in one command, and ``init --validate``: what is insecure in one.

``init --production DIR`` writes the org key, an admin token, the transparency log's key and the
org's certificate of it, and a collector config with auth on, manifests required, a private read
API and the log signed; then prints the environment the CLI and the agents need and what to do
next. ``--tls`` adds a private CA and a server certificate, and every listener serves TLS. The CLI's
lines pin the collector: its log key (it signs a challenge before the CLI sends the admin token) and,
with TLS, the CA. ``init DIR`` writes the local-development config. ``init --validate CONFIG`` names each
insecure setting of any config, one line each. Heavy imports (keys, YAML, the collector's config)
happen inside the command: the CLI's start-up does not pay for them.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from agentreplay_replay.cli._common import CLIError

if TYPE_CHECKING:
    from agentreplay_collector.config import CollectorConfig
    from agentreplay_collector.permissions import Exposed

PANEL = "Keys and identities"
MIB = 1 << 20
GRPC_PORT, HTTP_PORT, CONTROL_PORT = 4317, 4318, 4320
app = typer.Typer()


@dataclass(frozen=True)
class Layout:
    """Where ``init`` puts each file under DIR (absolute, so the collector starts from anywhere)."""

    root: Path

    @property
    def keys(self) -> Path:
        return self.root / "keys"

    @property
    def org_key(self) -> Path:
        return self.keys / "org.key"

    @property
    def org_pub(self) -> Path:
        return self.keys / "org.pub"

    @property
    def public(self) -> Path:
        """What agents and the CLI are told of: public files only, so that no path they hold points into a
        folder with a private key (``keys/`` holds the org key, ``tls/`` the CA's)."""
        return self.root / "public"

    @property
    def public_org_pub(self) -> Path:
        return self.public / "org.pub"

    @property
    def public_ca_cert(self) -> Path:
        return self.public / "ca.pem"

    @property
    def admin_token(self) -> Path:
        return self.root / "admin.token"

    @property
    def log_key(self) -> Path:
        return self.root / "log" / "log.key"

    @property
    def log_cert(self) -> Path:
        return self.root / "log" / "log.cert.json"

    @property
    def manifests(self) -> Path:
        return self.root / "manifests"

    @property
    def config(self) -> Path:
        return self.root / "otel-collector.yaml"

    @property
    def ca_cert(self) -> Path:
        return self.root / "tls" / "ca.pem"

    @property
    def ca_key(self) -> Path:
        return self.root / "tls" / "ca.key"

    @property
    def server_cert(self) -> Path:
        return self.root / "tls" / "server.pem"

    @property
    def server_key(self) -> Path:
        return self.root / "tls" / "server.key"

    @property
    def store(self) -> Path:
        return self.root / "store"

    def files(self, production: bool, tls: bool = False) -> list[Path]:
        if not production:
            return [self.config]
        certs = [self.ca_cert, self.ca_key, self.server_cert, self.server_key, self.public_ca_cert] if tls else []
        return [self.org_key, self.org_pub, self.public_org_pub, self.admin_token, self.log_key, self.log_cert, *certs,
                self.config]


@dataclass(frozen=True)
class Finding:
    """One insecure setting: the config key it is at, and why it matters."""

    key: str
    why: str


@app.command("init", rich_help_panel=PANEL)
def init(
    directory: Annotated[Path | None, typer.Argument(help="Where to write the keys and the config.")] = None,
    production: Annotated[
        bool, typer.Option("--production", help="Auth on, manifests required, private read API, signed log.")
    ] = False,
    force: Annotated[bool, typer.Option("--force", help="Replace files that exist (old keys stop verifying).")] = False,
    listen: Annotated[
        str, typer.Option("--listen", help="The address the collector binds (production; loopback for development).")
    ] = "0.0.0.0",
    host: Annotated[
        str | None, typer.Option("--host", help="How agents reach the collector (default: this machine's name).")
    ] = None,
    validate: Annotated[
        Path | None, typer.Option("--validate", metavar="CONFIG", help="Name each insecure setting of CONFIG.")
    ] = None,
    tls: Annotated[
        bool, typer.Option("--tls", help="Production: a private CA and a server certificate; every listener serves TLS.")
    ] = False,
) -> None:
    """Set up a collector in one command, or check a config for anything insecure.

    \b
    --production DIR writes, into DIR: keys/org.key (0600) and keys/org.pub, public/org.pub (what
    agents and the CLI are told of: no private key beside it), admin.token (0600), log/log.key (0600)
    and log/log.cert.json, and otel-collector.yaml (a memory budget sized for this machine); then
    prints the environment for the CLI and for agents, and the next steps. Folders are 0700, whatever
    the umask. Existing files are kept unless --force.
    --tls adds tls/ca.pem (and public/ca.pem), tls/ca.key (0600), tls/server.pem and tls/server.key
    (0600): the server certificate names --host, --listen, this machine, localhost and 127.0.0.1.
    --validate CONFIG: one line per insecure setting, exit 1; exit 0 when there is none.

    \b
    Examples:
      agentreplay init --production /etc/agentreplay
      agentreplay init --production ./prod --listen 10.0.0.5 --host collector.internal
      agentreplay init --production /etc/agentreplay --tls --host collector.internal
      agentreplay init ./dev
      agentreplay init --validate /etc/agentreplay/otel-collector.yaml
    """
    if validate is not None:
        if directory is not None:
            raise CLIError("give DIR or --validate CONFIG, not both")
        _needs_collector("checking a collector's config (--validate) needs the collector's own rules")
        raise typer.Exit(_validate(validate))
    if directory is None:
        raise CLIError("give the directory to write into (agentreplay init --production DIR), or --validate CONFIG")
    if tls and not production:
        raise CLIError("--tls goes with --production (the development config listens on loopback only)")
    layout = Layout(directory.expanduser().resolve())
    existing = [path for path in layout.files(production, tls) if path.exists()]
    if existing and not force:
        raise CLIError(f"{existing[0]} exists; pass --force to replace it (keys replaced stop verifying)")
    if production:
        _needs_collector("a production set-up (--production) is checked with the collector's own rules")
        _say(*secure_layout(layout))  # before anything is written: refused, or made owner-only
        _write_production(layout, listen, tls=tls)
        names = _certificate_names(listen, host) if tls else []
        if tls:
            _write_certificates(layout, names)
        _print_production(layout, listen, host or _machine_name(), tls_names=names)
    else:
        _private_folder(layout.root)
        _write_owner_first(layout.config, collector_yaml(layout, production=False, listen="127.0.0.1"), mode=0o644)
        _print_development(layout)


# --- writing -----------------------------------------------------------------------------------------
def _needs_collector(needs: str) -> None:
    """The collector's config and permission rules (its distribution), or a CLIError that says how to install them."""
    from agentreplay_replay.cli._client import collector_module

    collector_module("config", needs)
    collector_module("permissions", needs)


def _certificate_names(listen: str, host: str | None) -> list[str]:
    """The names the server certificate is for: how agents reach it, where it listens, this machine, loopback."""
    import socket

    machine = socket.gethostname()
    names = [host or machine, listen, machine, "localhost", "127.0.0.1", "::1"]
    from agentreplay_replay.cli._certs import subject_alternative_names

    return [str(getattr(n, "value", n)) for n in subject_alternative_names(n for n in names if n)]


def _write_certificates(layout: Layout, names: list[str]) -> None:
    """A private CA (its key 0600) and a server certificate from it for ``names`` (its key 0600); the CA's
    certificate again in ``public/``, for agents and the CLI."""
    from agentreplay_replay.cli import _certs

    _private_folder(layout.ca_cert.parent)
    ca = _certs.make_ca(f"AgentReplay collector CA ({layout.root.name})")
    ca.write(layout.ca_cert, layout.ca_key)
    _certs.write_file(layout.public_ca_cert, layout.ca_cert.read_bytes(), 0o644)
    _certs.issue(ca, names[0], names=names).write(layout.server_cert, layout.server_key)


def _write_production(layout: Layout, listen: str, *, tls: bool = False) -> None:
    """Every file and folder with its own mode, whatever the umask (``chmod`` after each is made)."""
    from cryptography.hazmat.primitives import serialization

    from agentreplay_otel import core
    from agentreplay_replay.cli._certs import write_file

    for folder in (layout.root, layout.keys, layout.public, layout.log_key.parent, layout.manifests, layout.store):
        _private_folder(folder)
    for replaced in layout.files(production=True):  # --force: each written anew, never through an old one
        replaced.unlink(missing_ok=True)
    org = core.generate_key()
    core.write_private_key(org, layout.org_key)
    public = org.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    for path in (layout.org_pub, layout.public_org_pub):  # keys/: the pair `--keys` commands read; public/: agents'
        write_file(path, public, 0o644)
    import secrets

    _write_owner_first(layout.admin_token, secrets.token_urlsafe(32) + "\n", mode=0o600)
    log = core.generate_key()
    core.write_private_key(log, layout.log_key)
    certificate = core.certify_log_key(org, log.public_key())
    _write_owner_first(layout.log_cert, json.dumps(certificate, indent=2) + "\n", mode=0o644)
    _write_owner_first(layout.config, collector_yaml(layout, production=True, listen=listen, tls=tls), mode=0o644)


def _write_owner_first(path: Path, text: str, *, mode: int) -> None:
    """Write ``text`` created with ``mode`` (a secret is never readable by others, even for a moment)."""
    from agentreplay_replay.cli._certs import write_file

    write_file(path, text.encode(), mode)


def _private_folder(folder: Path) -> None:
    """``folder`` and any folder above it that is missing, made 0700 whatever the umask (``mkdir``'s mode is
    masked by it; the umask may even take the owner's own bits)."""
    import os

    missing = [p for p in (folder, *folder.parents) if not p.exists()]
    for path in reversed(missing):
        path.mkdir(mode=0o700, exist_ok=True)
        os.chmod(path, 0o700)


def _q(value: str) -> str:
    """A YAML double-quoted scalar (JSON's string syntax is YAML's)."""
    return json.dumps(value)


def collector_yaml(layout: Layout, *, production: bool, listen: str, tls: bool = False) -> str:
    """The collector config ``init`` writes, in the grammar of otel-collector.yaml."""
    host = _bracketed(listen)
    if production:
        wire = ("# Every listener serves TLS with the certificate tls/ca.pem issued (tls: below).\n" if tls else
                "# The collector speaks plain gRPC and HTTP: off a trusted network, serve TLS (each listener's\n"
                "# tls: cert_file, key_file; `agentreplay init --production --tls` writes them).\n")
        head = (
            "# AgentReplay collector, production: written by `agentreplay init --production`.\n"
            "# The grammar of otel-collector.yaml (docs/collector.md). Auth is on: every export carries an\n"
            "# identity token the org key issued, for an agent under a signed manifest. Reads take the admin\n"
            "# token or an agent's own token.\n"
            f"{wire}"
            "# `agentreplay init --validate` on this file names anything insecure.\n"
        )
        auth = f"    org_public_key: {_q(str(layout.org_pub))}\n"
        scope = (
            "    require_manifests: true             # an agent whose token binds no known manifest is refused\n"
            f"    manifests_dir: {_q(str(layout.manifests))}   # signed manifests known at start\n"
            f"    admin_token_file: {_q(str(layout.admin_token))}   # owner-only: kill, resume, every read\n"
        )
        control_insecure = "    insecure: false                       # reads take the admin token or an agent's own\n"
        transparency = (
            "  agentreplay_transparency:\n"
            f"    signing_key: {_q(str(layout.log_key))}   # owner-only\n"
            f"    certificate: {_q(str(layout.log_cert))}\n"
            "    checkpoint_interval: 10s\n"
            "    checkpoint_refresh: 1h\n"
        )
        limit = memory_limit()
        memory = (
            "  agentreplay_memory:                  # every buffer kept for a sender or a reader, in bytes\n"
            f"    limit: {limit // MIB}MiB                      # an eighth of this machine's memory, within 128 to 256"
            " MiB\n"
        )
        extensions = "[agentreplay_control, agentreplay_analysis, agentreplay_transparency, agentreplay_memory]"
    else:
        head = (
            "# AgentReplay collector, local development: written by `agentreplay init`.\n"
            "# Every endpoint on loopback, auth off, reads open. For anything shared:\n"
            "# `agentreplay init --production DIR`.\n"
        )
        auth = "    insecure: true                        # local development only: logged loudly at start\n"
        scope = (
            "    require_manifests: false\n"
            "    admin_token: ${env:AGENTREPLAY_ADMIN_TOKEN:-}   # empty: kill/resume are refused\n"
        )
        control_insecure = "    insecure: true                        # reads need no token (loopback only)\n"
        transparency = memory = ""
        extensions = "[agentreplay_control, agentreplay_analysis]"
    store = _q(f"${{env:AGENTREPLAY_STORE_ENDPOINT:-chdb://{layout.store}}}")

    def served(indent: str) -> str:  # a listener's tls, when --tls
        if not tls:
            return ""
        return (f"{indent}tls:\n{indent}  cert_file: {_q(str(layout.server_cert))}\n"
                f"{indent}  key_file: {_q(str(layout.server_key))}   # owner-only\n"
                f'{indent}  min_version: "1.2"\n')

    return (
        f"{head}\n"
        "receivers:\n  otlp:\n    protocols:\n"
        f"      grpc:\n        endpoint: ${{env:AGENTREPLAY_OTLP_GRPC_ENDPOINT:-{host}:{GRPC_PORT}}}\n"
        "        max_recv_msg_size_mib: 16\n"
        f"{served('        ')}"
        f"      http:\n        endpoint: ${{env:AGENTREPLAY_OTLP_HTTP_ENDPOINT:-{host}:{HTTP_PORT}}}\n"
        "        max_request_body_size: 16777216\n"
        f"{served('        ')}\n"
        "processors:\n"
        f"  agentreplay_auth:\n{auth}"
        "  agentreplay_chain:\n    quiet_period: 2s\n    incomplete_after: 5m\n"
        f"  agentreplay_scope:\n{scope}"
        "    webhooks: []                          # alert receivers, e.g. [https://alerts.example.com/agentreplay]\n"
        "  batch:\n    timeout: 200ms\n\n"
        f"exporters:\n  clickhouse:\n    endpoint: {store}\n"
        "    database: agentreplay\n    create_schema: true\n    ttl: 0\n\n"
        "extensions:\n"
        f"  agentreplay_control:\n    endpoint: ${{env:AGENTREPLAY_CONTROL_ENDPOINT:-{host}:{CONTROL_PORT}}}\n"
        f"{control_insecure}"
        f"{served('    ')}"
        "  agentreplay_analysis:\n    poll_interval: 2s\n    judge:\n"
        "      base_url: ${env:AGENTREPLAY_ANALYSIS_BASE_URL:-}\n"
        "      model: ${env:AGENTREPLAY_ANALYSIS_MODEL:-}\n"
        "      api_key: ${env:AGENTREPLAY_ANALYSIS_API_KEY:-}\n"
        f"{transparency}{memory}\n"
        f"service:\n  extensions: {extensions}\n"
        "  pipelines:\n    traces:\n      receivers: [otlp]\n"
        "      processors: [agentreplay_auth, agentreplay_chain, agentreplay_scope, batch]\n"
        "      exporters: [clickhouse]\n"
        "  telemetry:\n    logs:\n      level: info\n"
    )


def memory_limit(machine: int | None = None) -> int:
    """The collector's memory budget ``init --production`` writes: an eighth of the machine's memory (its
    cgroup's limit in a container), within 128 and 256 MiB; 256 MiB when the machine's is not known.

    Why: 128 MiB is the least the receivers need (a 16 MiB export counted 4 times within the exports' half,
    ``agentreplay_collector.budget``), and the attacks of docs/security.md (Memory budget) were measured and
    held at 128 and 256 MiB; the collector's default (up to 1 GiB) lets clients make the collector hold far
    more than the process needs, and an eighth leaves the rest to the store (chDB in the same process) and
    the machine's other work."""
    from agentreplay_collector import budget

    found = budget.machine_memory() if machine is None else machine
    if not found:
        return 256 * MIB
    return max(128 * MIB, min(256 * MIB, found // 8 // MIB * MIB))


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _machine_name() -> str:
    import socket

    return socket.gethostname() or "127.0.0.1"


# --- printing ----------------------------------------------------------------------------------------
def _say(*lines: str) -> None:
    """Plain lines, never wrapped or marked up: every command and export line can be copied whole."""
    sys.stdout.write("".join(line + "\n" for line in lines))


def _print_production(layout: Layout, listen: str, host: str, *, tls_names: list[str] | None = None) -> None:
    from agentreplay_otel.core import semconv

    local = "127.0.0.1" if listen in ("0.0.0.0", "::", "localhost") else _bracketed(listen)
    agent_host = _bracketed(host)
    scheme = "https" if tls_names else "http"
    certs = [
        (layout.ca_cert, "the private CA: agents and the CLI check the collector against it (copy it to them)"),
        (layout.ca_key, "the CA's key (owner-only): keep it offline; it issues the collector's certificates"),
        (layout.public_ca_cert, "the private CA again, away from its key: for agents"),
        (layout.server_cert, f"the collector's certificate, for {', '.join(tls_names)}" if tls_names else ""),
        (layout.server_key, "its key (owner-only)"),
    ] if tls_names else []
    files = [
        (layout.org_key, "the org's signing key (owner-only): keep it offline once agents are issued"),
        (layout.org_pub, "the org public key, beside it: for the collector and the --keys commands"),
        (layout.public_org_pub, "the org public key again, away from any private key: for agents, the CLI and "
                                "verifiers"),
        (layout.admin_token, "the admin token (owner-only)"),
        (layout.log_key, "the collector's transparency-log key (owner-only); it also proves the collector to the CLI"),
        (layout.log_cert, "the org's certificate of the log key: the CLI's pin of this collector"),
        *certs,
        (layout.manifests, "signed manifests the collector loads at start"),
        (layout.config, "the collector: auth on, manifests required, private read API, signed log"
                        + (", TLS on every listener" if tls_names else "")),
    ]
    names = [str(path.relative_to(layout.root)) for path, _ in files]
    width = max(map(len, names))
    _say(f"production set-up in {layout.root}:",
         *(f"  {name.ljust(width)}  {what}" for name, (_, what) in zip(names, files, strict=True)))
    _say(
        "",
        "start the collector:",
        f"  agentreplay-collector --config {layout.config}",
        "",
        "environment for the CLI (on the collector's machine; the admin token goes only to the collector that "
        "proves the pinned log key" + (", over TLS checked against the CA):" if tls_names else "):"),
        f"  export {semconv.ENV_COLLECTOR}={scheme}://{local}:{CONTROL_PORT}",
        *([f"  export {semconv.ENV_CONTROL_CERTIFICATE}={layout.ca_cert}"] if tls_names else []),
        f"  export {semconv.ENV_COLLECTOR_IDENTITY}={layout.log_cert}",
        f"  export {semconv.ENV_ADMIN_TOKEN_FILE}={layout.admin_token}",
        f"  export {semconv.ENV_ORG_PUBLIC_KEY}={layout.public_org_pub}",
        f"  export {semconv.ENV_ORG_KEY}={layout.org_key}",
        f"  export {semconv.ENV_STORE}={layout.store}",
        "",
        "next, for each agent: sign its manifest, issue its identity (it prints the agent's own lines):",
        f"  agentreplay manifest sign AGENT.manifest.json --keys {layout.keys}",
        f"  agentreplay identity issue --agent AGENT --manifest AGENT.manifest.signed.json --keys {layout.keys}",
        "",
        "environment for agents (with the lines identity issue prints):",
        f"  export OTEL_EXPORTER_OTLP_ENDPOINT={scheme}://{agent_host}:{GRPC_PORT}",
        *([f"  export {semconv.ENV_OTLP_CERTIFICATE}={layout.public_ca_cert}"] if tls_names else []),
        f"  export {semconv.ENV_COLLECTOR}={scheme}://{agent_host}:{CONTROL_PORT}",
        f"  export {semconv.ENV_ORG_PUBLIC_KEY}={layout.public_org_pub}",
        "  opentelemetry-instrument python agent.py",
        "",
        "check it any time: agentreplay init --validate " + str(layout.config),
    )
    if tls_names:
        _say("", f"TLS: agents check the collector against {layout.public_ca_cert} (OTEL_EXPORTER_OTLP_CERTIFICATE; the "
             "control client takes it too), so copy that file to each agent's machine and keep "
             f"{layout.ca_key} offline. For mutual TLS set each listener's tls.client_ca_file (docs/security.md#tls).")
    elif listen not in ("127.0.0.1", "::1", "localhost"):
        _say("", f"the collector listens on {listen} in plain gRPC/HTTP: identity tokens and runs cross the network "
             "readable, and `init --validate` names each listener; `agentreplay init --production --tls` serves TLS")


def _print_development(layout: Layout) -> None:
    from agentreplay_otel.core import semconv

    _say(
        f"development config: {layout.config} (loopback only, auth off, reads open)",
        "",
        "start the collector:",
        f"  agentreplay-collector --config {layout.config}",
        "",
        "environment for the CLI:",
        f"  export {semconv.ENV_COLLECTOR}=http://127.0.0.1:{CONTROL_PORT}",
        f"  export {semconv.ENV_STORE}={layout.store}",
        "",
        "environment for agents:",
        f"  export OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:{GRPC_PORT}",
        "  opentelemetry-instrument python agent.py",
        "",
        f"for anything shared: agentreplay init --production DIR (and --validate {layout.config})",
    )


# --- validate ----------------------------------------------------------------------------------------
def _validate(path: Path) -> int:
    """One line per insecure setting of the config at ``path``: 1 if any, else 0."""
    from agentreplay_client.errors import ConfigError
    from agentreplay_collector.config import load_config

    try:
        config = load_config(path, strict=False)
    except ConfigError as exc:
        raise CLIError(f"{path}: {exc}") from exc
    findings = insecure_settings(config, path)
    for finding in findings:
        _say(f"insecure: {finding.key}: {finding.why}")
    if not findings:
        _say(f"{path}: nothing insecure (auth on, manifests required, read API private, log signed, "
             "keys, store and folders owner-only, TLS or loopback on every listener)")
    return 1 if findings else 0


def insecure_settings(config: CollectorConfig, path: Path) -> list[Finding]:
    """Everything in ``config`` that leaves runs, reads or keys open, in the order of the file."""
    return [*_auth_findings(config), *_scope_findings(config, path), *_control_findings(config),
            *_log_findings(config), *_file_findings(config), *_tls_findings(config),
            *permission_findings(config, path)]


def _tls_findings(config: CollectorConfig) -> list[Finding]:
    """Each listener off loopback without TLS: what it carries (identity tokens, the admin token, runs) is readable
    and changeable on the way."""
    from agentreplay_collector.config import tls_listeners

    ends = [c.endpoint for c in (config.otlp.grpc, config.otlp.http, config.control) if c is not None]
    return [Finding(f"{key}.tls", f"none, and {end} is off loopback: identity tokens, the admin token and runs "
                                  "cross the network in plaintext (tls: cert_file, key_file; agentreplay init "
                                  "--production --tls)")
            for (key, tls), end in zip(tls_listeners(config), ends, strict=True)
            if tls is None and not end.is_loopback]


def _auth_findings(config: CollectorConfig) -> list[Finding]:
    if config.auth is not None and not config.auth.insecure:
        return []
    key = "processors.agentreplay_auth" + (".insecure" if config.auth is not None else "")
    why = "auth is off: anyone who reaches the receivers records runs as any agent"
    exposed = [str(r.endpoint) for r in (config.otlp.grpc, config.otlp.http)
               if r is not None and not r.endpoint.is_loopback]
    if config.control is not None and not config.control.endpoint.is_loopback:
        exposed.append(str(config.control.endpoint))
    if exposed:
        why += f", and {', '.join(exposed)} is off loopback (the collector refuses to start)"
    return [Finding(key, why)]


def _scope_findings(config: CollectorConfig, path: Path) -> list[Finding]:
    scope = config.scope
    if scope is None:
        return [Finding("processors.agentreplay_scope",
                        "not in the pipeline: no manifest is enforced, no spend cap, no kill switch")]
    found = []
    if not scope.require_manifests:
        found.append(Finding("processors.agentreplay_scope.require_manifests",
                             "false: an agent with no manifest is recorded, not restricted"))
    if scope.admin_token is None:
        found.append(Finding("processors.agentreplay_scope.admin_token",
                             "none: no one can kill a runaway run or agent (admin_token_file: an owner-only file)"))
    elif scope.admin_token_file is None and _literal_token(path):
        from agentreplay_collector.config import open_to_others

        mode = open_to_others(path)
        if mode is not None:
            found.append(Finding("processors.agentreplay_scope.admin_token",
                                 f"written in {path}, which others may read (mode {mode:04o}): "
                                 "use admin_token_file, owner-only"))
    return found


def _literal_token(path: Path) -> bool:
    """Whether the config file itself holds the admin token (not an ``${env:...}`` reference)."""
    import yaml

    try:
        doc = yaml.safe_load(path.read_text())
        token = doc["processors"]["agentreplay_scope"]["admin_token"]
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        return False
    return isinstance(token, str) and bool(token) and "${env:" not in token


def _control_findings(config: CollectorConfig) -> list[Finding]:
    if config.control is not None and config.control.insecure:
        return [Finding("extensions.agentreplay_control.insecure",
                        "true: the read API answers without a token (prompts, tool arguments and results)")]
    return []


def _log_findings(config: CollectorConfig) -> list[Finding]:
    if config.transparency is not None:
        return []
    return [Finding("extensions.agentreplay_transparency",
                    "off: no signed checkpoints, so a deleted run or a rolled-back store goes unnoticed "
                    "(agentreplay log certify)")]


def _file_findings(config: CollectorConfig) -> list[Finding]:
    from agentreplay_collector.config import open_to_others

    found = []
    for secret in config.secret_files:
        if (mode := open_to_others(secret.path)) is not None:
            found.append(Finding(secret.key, f"{secret.path} is open to others (mode {mode:04o}): chmod 600 it "
                                             "(the collector refuses to start)"))
    org_pub = config.auth.org_public_key if config.auth is not None else None
    org_key = org_pub.with_name("org.key") if org_pub is not None else None
    if org_key is not None and (mode := open_to_others(org_key)) is not None:
        found.append(Finding("processors.agentreplay_auth.org_public_key",
                             f"the org's private key beside it, {org_key}, is open to others (mode {mode:04o}): "
                             "chmod 600 it, or keep it off this machine"))
    return found


# --- permissions: who else may read, write or replace the set-up (agentreplay_collector.permissions) ---
def secure_layout(layout: Layout) -> list[str]:
    """Before ``init --production`` writes: DIR, the folders and files it writes or reuses (the store
    included) and the folders above DIR checked. What others may open that is the user's is made
    owner-only (folders 0700, keys and token 0600, public files not writable by others), one line each;
    anything owned by another user, a link, or a folder above DIR that lets others replace it is
    refused, every path named, before anything changes."""
    from agentreplay_collector import permissions

    found = _layout_exposed(layout)
    refused = [e for e in found if e.fix is None]
    if refused:
        raise CLIError("\n".join([
            f"{layout.root} is not safe to set up in: another user could read the store or the keys, or "
            "replace the admin token. Nothing was written or changed:",
            *(f"  {e.line()}" for e in refused),
            "use a folder of your own (no folder above it writable by others), or fix these and run init again"]))
    permissions.fix(found)  # top down: once a folder is private, nothing in it can be swapped
    left = _layout_exposed(layout)
    if left:
        raise CLIError("\n".join([f"{layout.root} changed while init secured it:", *(f"  {e.line()}" for e in left)]))
    return [f"secured {e.path}: {e.why.split(' (should', 1)[0]}; now {e.fix:04o}" for e in found if e.fix is not None]


def _layout_exposed(layout: Layout) -> list[Exposed]:
    """What is wrong with DIR, the folders above it, and what ``init`` writes or reuses in it, top down."""
    from agentreplay_collector.permissions import Kind, check, parents, tree

    files = layout.files(production=True)
    tls = layout.root / "tls"  # --tls: the CA's and the server's certificates and keys
    if tls.is_dir() and not tls.is_symlink():
        files += sorted(p for p in tls.iterdir() if p.suffix in (".key", ".pem"))
    folders = sorted({layout.root, layout.manifests, tls, *(p.parent for p in files)}, key=lambda p: len(p.parts))
    found = parents(layout.root)
    for folder in folders:
        found += check(folder, Kind.PRIVATE_FOLDER)
    found += tree(layout.store, fixing=True)
    for path in files:
        found += check(path, Kind.SECRET_FILE if _secret(path) else Kind.PUBLIC_FILE)
    return found


def _secret(path: Path) -> bool:
    return path.suffix == ".key" or path.name.endswith(".token")


def permission_findings(config: CollectorConfig, path: Path) -> list[Finding]:
    """``--validate``: the config itself and each path it names that another user owns, may write, or
    may replace through a folder above it; the store and incidents folders if others may open them or
    write in them. A key or token file others may open is :func:`_file_findings`' (said once)."""
    from agentreplay_collector.permissions import Kind, check, parents, tree

    named: list[tuple[str, Path, Kind | None]] = [("config", path, Kind.PUBLIC_FILE)]
    named += [(s.key, s.path, Kind.SECRET_FILE) for s in config.secret_files]
    if config.auth is not None and config.auth.org_public_key is not None:
        pub, key = config.auth.org_public_key, "processors.agentreplay_auth.org_public_key"
        named += [(key, pub, Kind.PUBLIC_FILE), (key, pub.with_name("org.key"), Kind.SECRET_FILE)]
    if config.scope is not None and config.scope.manifests_dir is not None:
        named.append(("processors.agentreplay_scope.manifests_dir", config.scope.manifests_dir, Kind.PUBLIC_FILE))
    if config.transparency is not None:
        named.append(("extensions.agentreplay_transparency.certificate", config.transparency.certificate,
                      Kind.PUBLIC_FILE))
    store = config.clickhouse.endpoint if config.clickhouse is not None else ""
    if store.startswith("chdb://"):
        named.append(("exporters.clickhouse.endpoint", Path(store.removeprefix("chdb://")), None))
    incidents = config.analysis.incidents if config.analysis is not None else None
    if incidents is not None:
        named.append(("extensions.agentreplay_analysis.incidents.dir", incidents.dir, None))
    found: list[Finding] = []
    seen: set[Path] = set()
    for key, named_path, kind in named:
        target = named_path.expanduser().absolute()
        if kind is None:  # recorded runs: a private folder, nothing in it others may write
            exposed = [*tree(target, fixing=False), *parents(target)]
        else:  # an open key's mode is _file_findings' to say; here who owns it, and the folders above
            exposed = [e for e in check(target, kind, follow=True) if kind is not Kind.SECRET_FILE or e.fix is None]
            exposed += parents(target)
        for e in exposed:
            if e.path not in seen:
                seen.add(e.path)
                found.append(Finding(key, e.line()))
    return found
