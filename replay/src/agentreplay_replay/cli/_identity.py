"""Keys, manifests and identities: ``keys init``, ``manifest sign``, ``identity issue``.

Key material is written owner-only (0600).
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Annotated

import typer
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agentreplay_otel import core
from agentreplay_otel.core import AgentReplayError, semconv
from agentreplay_replay.cli._common import CLIError, JsonOpt, out, print_json

DEFAULT_KEYS = Path(".agentreplay/keys")
PANEL = "Keys and identities"

keys_app = typer.Typer(help="The org's signing key.", no_args_is_help=True)
manifest_app = typer.Typer(help="Scope manifests: sign them with the org key.", no_args_is_help=True)
identity_app = typer.Typer(
    help="Agent identities: a key pair and a token bound to a manifest.", no_args_is_help=True
)
app = typer.Typer()
app.add_typer(keys_app, name="keys", rich_help_panel=PANEL)
app.add_typer(manifest_app, name="manifest", rich_help_panel=PANEL)
app.add_typer(identity_app, name="identity", rich_help_panel=PANEL)

KeysDirOpt = Annotated[Path, typer.Option("--keys", help="Directory of the org key pair.")]
OrgKeyOpt = Annotated[
    Path | None,
    typer.Option(
        "--org-key",
        envvar=semconv.ENV_ORG_KEY,
        show_envvar=True,
        help="The org's private key (default: KEYS/org.key).",
    ),
]


def _write_owner_only(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.chmod(path, 0o600)


def _org_key(keys: Path, org_key: Path | None) -> Ed25519PrivateKey:
    path = org_key or keys / "org.key"
    if not path.exists():
        raise CLIError(f"no org key at {path}: run `agentreplay keys init` (or pass --org-key)")
    try:
        return core.load_private_key(path)
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
    """Create the org's Ed25519 signing key (org.key, 0600) and its public key (org.pub).

    \b
    Examples:
      agentreplay keys init
      agentreplay keys init --keys /secure/org-keys
    """
    private, public = keys / "org.key", keys / "org.pub"
    if private.exists() and not force:
        raise CLIError(f"{private} exists; pass --force to replace it")
    key = core.generate_key()
    core.write_private_key(key, private)
    core.write_public_key(key.public_key(), public)
    out.print(f"org key {core.key_id(key)}: {private} (owner-only), public key {public}")
    out.print(f"collector: processors.agentreplay_auth.org_public_key: {public}")


@manifest_app.command("sign")
def manifest_sign(
    file: Annotated[Path, typer.Argument(help="The manifest (JSON) to sign.")],
    output: Annotated[Path | None, typer.Option("--out", help="(default: FILE.signed.json)")] = None,
    keys: KeysDirOpt = DEFAULT_KEYS,
    org_key: OrgKeyOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Validate a manifest and sign it with the org key.

    \b
    Examples:
      agentreplay manifest sign policies/flight-agent.manifest.json
    """
    try:
        body = json.loads(file.read_text())
        parsed = core.parse_manifest(body)
    except (OSError, ValueError) as exc:
        raise CLIError(f"cannot read {file}: {exc}") from exc
    except AgentReplayError as exc:
        raise CLIError(f"{file}: {exc}") from exc
    signed = core.sign_manifest(body, _org_key(keys, org_key))
    target = output or file.with_name(file.name.removesuffix(".json") + ".signed.json")
    target.write_text(json.dumps(signed, indent=2) + "\n")
    if json_:
        print_json({"signed": str(target), "sha256": parsed.sha256, "kid": signed["kid"]})
    else:
        out.print(f"signed {file} -> {target}\nmanifest sha256 {parsed.sha256}")


@identity_app.command("issue")
def identity_issue(
    agent: Annotated[str, typer.Option("--agent", help="The agent id.")],
    manifest: Annotated[Path | None, typer.Option("--manifest", help="The signed manifest to bind.")] = None,
    out_dir: Annotated[Path | None, typer.Option("--out", help="(default: KEYS/agents/AGENT)")] = None,
    ttl_days: Annotated[float, typer.Option("--ttl-days", min=0.0, help="Token lifetime in days.")] = 30.0,
    keys: KeysDirOpt = DEFAULT_KEYS,
    org_key: OrgKeyOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Create the agent's key pair and an identity token for it (both owner-only).

    Prints the environment the agent runs with (its key, token, manifest, the org's public key).

    \b
    Examples:
      agentreplay identity issue --agent flight-booker --manifest policies/flight-agent.manifest.signed.json
    """
    org = _org_key(keys, org_key)
    digest = ""
    if manifest is not None:
        try:
            body = core.verify_manifest(core.load_signed_manifest(manifest), org.public_key())
        except AgentReplayError as exc:
            raise CLIError(f"{manifest}: {exc}") from exc
        digest = core.manifest_sha256(body)
    target = out_dir or keys / "agents" / agent
    agent_key = core.generate_key()
    core.write_private_key(agent_key, target / "agent.key")
    token = core.issue_identity(
        org_key=org,
        agent_id=agent,
        agent_public_key=agent_key.public_key(),
        manifest_sha256=digest,
        ttl_s=int(ttl_days * 86400),
    )
    _write_owner_only(target / "identity.jwt", token + "\n")
    # absolute: the agent runs from its own folder, rarely the one these were issued in
    env = {
        semconv.ENV_AGENT_KEY: str((target / "agent.key").resolve()),
        semconv.ENV_IDENTITY: str((target / "identity.jwt").resolve()),
        semconv.ENV_ORG_PUBLIC_KEY: str((org_key or keys / "org.key").with_name("org.pub").resolve()),
    }
    if manifest is not None:
        env[semconv.ENV_MANIFEST] = str(Path(manifest).resolve())
    if json_:
        print_json({"agent": agent, "kid": core.key_id(agent_key), "manifest_sha256": digest, "env": env})
        return
    out.print(f"agent {agent}: key {core.key_id(agent_key)}, token bound to manifest {digest or '(none)'}")
    for name, value in env.items():
        out.print(f"export {name}={shlex.quote(value)}", markup=False, highlight=False, soft_wrap=True)
