"""``agentreplay`` control-plane commands: keys, manifests, identities, kill switch, decisions, trust.

    agentreplay keys init                                   the org signing key (owner-only file)
    agentreplay manifest sign FILE                          FILE.signed.json, signed by the org key
    agentreplay identity issue --agent ID --manifest FILE   the agent's key pair and identity token
    agentreplay kill RUN | --agent ID [--reason TEXT]       halt a run or an agent (admin)
    agentreplay resume RUN | --agent ID                     lift a halt (admin)
    agentreplay decisions RUN                               every policy decision of a run
    agentreplay alerts                                      alerts, newest first
    agentreplay trust [--agent ID]                          trust scores and their components

Key material is written owner-only (0600). Admin operations go to the collector's control
endpoint with the admin token (``AGENTREPLAY_ADMIN_TOKEN`` or ``--admin-token``); the
collector refuses them without it.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from agentreplay_collector.store import DEFAULT_COLLECTOR
from agentreplay_otel import identity, semconv
from agentreplay_otel.errors import AgentReplayError
from agentreplay_otel.manifest import parse_manifest
from agentreplay_replay.cli import CLIError, CollectorOpt, JsonOpt, _print_json, app, out

DEFAULT_KEYS = Path(".agentreplay/keys")

keys_app = typer.Typer(help="The org's signing key.", no_args_is_help=True)
manifest_app = typer.Typer(help="Scope manifests: sign them with the org key.", no_args_is_help=True)
identity_app = typer.Typer(
    help="Agent identities: a key pair and a token bound to a manifest.", no_args_is_help=True
)
app.add_typer(keys_app, name="keys")
app.add_typer(manifest_app, name="manifest")
app.add_typer(identity_app, name="identity")

KeysDirOpt = Annotated[Path, typer.Option("--keys", help="Directory of the org key pair.")]
OrgKeyOpt = Annotated[
    Path | None,
    typer.Option(
        "--org-key",
        envvar=semconv.ENV_ORG_KEY,
        show_envvar=True,
        help="The org's private key [default: KEYS/org.key].",
    ),
]
AdminOpt = Annotated[
    str | None,
    typer.Option(
        "--admin-token",
        envvar=semconv.ENV_ADMIN_TOKEN,
        show_envvar=True,
        help="The collector's admin token (kill, resume).",
    ),
]


def _write_owner_only(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.chmod(path, 0o600)


def _org_key(keys: Path, org_key: Path | None) -> identity.Ed25519PrivateKey:
    path = org_key or keys / "org.key"
    if not path.exists():
        raise CLIError(f"no org key at {path}: run `agentreplay keys init` (or pass --org-key)")
    try:
        return identity.load_private_key(path)
    except AgentReplayError as exc:
        raise CLIError(str(exc)) from exc


@keys_app.command("init")
def keys_init(
    keys: KeysDirOpt = DEFAULT_KEYS,
    force: Annotated[
        bool,
        typer.Option(
            help="Replace an existing key (every manifest and token signed with the old one stops verifying)."
        ),
    ] = False,
) -> None:
    """Create the org's Ed25519 signing key (org.key, 0600) and its public key (org.pub)."""
    private, public = keys / "org.key", keys / "org.pub"
    if private.exists() and not force:
        raise CLIError(f"{private} exists; pass --force to replace it")
    key = identity.generate_key()
    identity.write_private_key(key, private)
    identity.write_public_key(key.public_key(), public)
    out.print(f"org key {identity.key_id(key)}: {private} (owner-only), public key {public}")
    out.print(f"collector: processors.agentreplay_auth.org_public_key: {public}")


@manifest_app.command("sign")
def manifest_sign(
    file: Annotated[Path, typer.Argument(help="The manifest (JSON) to sign.")],
    output: Annotated[Path | None, typer.Option("--out", help="[default: FILE.signed.json]")] = None,
    keys: KeysDirOpt = DEFAULT_KEYS,
    org_key: OrgKeyOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Validate a manifest and sign it with the org key."""
    try:
        body = json.loads(file.read_text())
        parsed = parse_manifest(body)
    except (OSError, ValueError) as exc:
        raise CLIError(f"cannot read {file}: {exc}") from exc
    except AgentReplayError as exc:
        raise CLIError(f"{file}: {exc}") from exc
    signed = identity.sign_manifest(body, _org_key(keys, org_key))
    target = output or file.with_name(file.name.removesuffix(".json") + ".signed.json")
    target.write_text(json.dumps(signed, indent=2) + "\n")
    if json_:
        _print_json({"signed": str(target), "sha256": parsed.sha256, "kid": signed["kid"]})
    else:
        out.print(f"signed {file} -> {target}\nmanifest sha256 {parsed.sha256}")


@identity_app.command("issue")
def identity_issue(
    agent: Annotated[str, typer.Option("--agent", help="The agent id.")],
    manifest: Annotated[Path | None, typer.Option("--manifest", help="The signed manifest to bind.")] = None,
    out_dir: Annotated[Path | None, typer.Option("--out", help="[default: KEYS/agents/AGENT]")] = None,
    ttl_days: Annotated[float, typer.Option("--ttl-days", min=0.0, help="Token lifetime in days.")] = 30.0,
    keys: KeysDirOpt = DEFAULT_KEYS,
    org_key: OrgKeyOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Create the agent's key pair and an identity token for it (both owner-only)."""
    org = _org_key(keys, org_key)
    digest = ""
    if manifest is not None:
        try:
            body = identity.verify_manifest(identity.load_signed_manifest(manifest), org.public_key())
        except AgentReplayError as exc:
            raise CLIError(f"{manifest}: {exc}") from exc
        digest = identity.manifest_sha256(body)
    target = out_dir or keys / "agents" / agent
    agent_key = identity.generate_key()
    identity.write_private_key(agent_key, target / "agent.key")
    token = identity.issue_identity(
        org_key=org,
        agent_id=agent,
        agent_public_key=agent_key.public_key(),
        manifest_sha256=digest,
        ttl_s=int(ttl_days * 86400),
    )
    _write_owner_only(target / "identity.jwt", token + "\n")
    env = {
        semconv.ENV_AGENT_KEY: str(target / "agent.key"),
        semconv.ENV_IDENTITY: str(target / "identity.jwt"),
        semconv.ENV_ORG_PUBLIC_KEY: str((org_key or keys / "org.key").with_name("org.pub")),
    }
    if manifest is not None:
        env[semconv.ENV_MANIFEST] = str(manifest)
    if json_:
        _print_json(
            {"agent": agent, "kid": identity.key_id(agent_key), "manifest_sha256": digest, "env": env}
        )
        return
    out.print(
        f"agent {agent}: key {identity.key_id(agent_key)}, token bound to manifest {digest or '(none)'}"
    )
    for name, value in env.items():
        out.print(f"export {name}={value}")


# --- the collector's control API ----------------------------------------------------------
def _control(collector: str | None) -> str:
    url = collector or os.environ.get(semconv.ENV_COLLECTOR) or DEFAULT_COLLECTOR
    return (url if "://" in url else f"http://{url}").rstrip("/")


def _request(
    collector: str | None,
    method: str,
    path: str,
    *,
    body: Any = None,
    params: dict[str, Any] | None = None,
    admin_token: str | None = None,
) -> Any:
    query = {k: v for k, v in (params or {}).items() if v is not None}
    url = _control(collector) + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
    headers = {"Content-Type": "application/json"}
    if admin_token:
        headers["Authorization"] = f"Bearer {admin_token}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=30) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        try:
            detail = json.loads(exc.read()).get("error", "")
        except ValueError:
            detail = ""
        raise CLIError(f"the collector refused: {exc.code} {detail}".strip()) from exc
    except (urllib.error.URLError, OSError) as exc:
        raise CLIError(f"no collector answers at {_control(collector)}: {exc}") from exc


def _target(run_id: str | None, agent: str | None) -> tuple[str, str]:
    if (run_id is None) == (agent is None):
        raise CLIError("name a run (RUN) or an agent (--agent ID), not both")
    return ("agent", agent) if agent is not None else ("run", str(run_id).lower())


@app.command()
def kill(
    run_id: Annotated[str | None, typer.Argument(help="The run to halt.")] = None,
    agent: Annotated[str | None, typer.Option("--agent", help="Halt every run of this agent.")] = None,
    reason: Annotated[
        str, typer.Option(help="Why (in the halt, the alert and the agent's error).")
    ] = "operator",
    admin_token: AdminOpt = None,
    collector: CollectorOpt = None,
) -> None:
    """Halt a run or an agent: its next LLM or tool call raises RunHalted. Recording continues."""
    scope, target = _target(run_id, agent)
    doc = _request(
        collector,
        "POST",
        "/v1/halts",
        body={"scope": scope, "target": target, "reason": reason},
        admin_token=admin_token,
    )
    out.print(f"halted {scope} {target}: {doc.get('reason', reason)}")


@app.command()
def resume(
    run_id: Annotated[str | None, typer.Argument(help="The run to resume.")] = None,
    agent: Annotated[str | None, typer.Option("--agent", help="Resume this agent.")] = None,
    admin_token: AdminOpt = None,
    collector: CollectorOpt = None,
) -> None:
    """Lift a halt on a run or an agent."""
    scope, target = _target(run_id, agent)
    _request(
        collector, "POST", "/v1/resume", body={"scope": scope, "target": target}, admin_token=admin_token
    )
    out.print(f"resumed {scope} {target}")


@app.command()
def decisions(
    run_id: Annotated[str, typer.Argument(help="The run.")],
    json_: JsonOpt = False,
    collector: CollectorOpt = None,
) -> None:
    """Every policy decision of a run: the guard's, Authorize's and the collector's."""
    doc = _request(collector, "GET", "/v1/decisions", params={"run": run_id.lower()})
    if json_:
        _print_json(doc)
        return
    table = Table("time", "tool", "decision", "rule", "source", "detail")
    for d in doc["decisions"]:
        table.add_row(d["time"], d["tool"], d["decision"], d["rule"], d.get("source", ""), d["detail"])
    out.print(table)


@app.command()
def alerts(
    limit: Annotated[int, typer.Option(min=1)] = 50,
    json_: JsonOpt = False,
    collector: CollectorOpt = None,
) -> None:
    """Alerts (scope violations, halts), newest first, and whether the webhooks took them."""
    doc = _request(collector, "GET", "/v1/alerts", params={"limit": limit})
    if json_:
        _print_json(doc)
        return
    table = Table("time", "severity", "kind", "agent", "run", "message", "delivered")
    for a in doc["alerts"]:
        table.add_row(
            a["time"],
            a["severity"],
            a["kind"],
            a["agent_id"],
            a["run_id"][:12],
            a["message"],
            "yes" if a["delivered"] else "no",
        )
    out.print(table)


@app.command()
def trust(
    agent: Annotated[str | None, typer.Option("--agent", help="Only this agent.")] = None,
    json_: JsonOpt = False,
    collector: CollectorOpt = None,
) -> None:
    """Trust scores from each agent's history, their components, tier and spend multiplier."""
    doc = _request(collector, "GET", "/v1/trust", params={"agent": agent})
    if json_:
        _print_json(doc)
        return
    table = Table(
        "agent", "score", "tier", "x spend", "runs", "failure rate", "regression pass", "violations"
    )
    for t in doc["agents"]:
        table.add_row(
            t["agent_id"],
            f"{t['score']:.3f}",
            t["tier"],
            f"{t['spend_multiplier']:g}",
            str(t["runs"]),
            f"{t['failure_rate']:.2f}",
            f"{t['regression_pass_rate']:.2f}",
            str(t["scope_violations"]),
        )
    out.print(table)
