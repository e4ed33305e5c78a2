"""Attack E1, as someone with write access to the store and the project's source would do it.

Rewrites one run in place with direct SQL: edits a tool result, recomputes every ``prev`` and
``hash``, and re-seals the run (or strips its seal); then does what it must to the key rows
so the new seal checks: replaces the agent's ``agent_keys`` row under the same kid with the
new key, and deletes, keeps or forges the certificate beside it.

    python store_attacker.py STORE RUN_ID --result TEXT --seal {fresh,strip,KEYFILE}
                             [--certificate {keep,delete,forge}] [--kid KID]

``--seal fresh``: a key the attacker made, named by the agent's own kid; ``KEYFILE``: a key
the attacker holds (another agent's), named by its own kid; ``strip``: no seal at all.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import time

from agentreplay_collector.store import Store
from agentreplay_otel import identity, semconv
from agentreplay_otel.core import GENESIS_HASH, SpanRecord, link_hash

DB = "agentreplay"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("store")
    parser.add_argument("run_id")
    parser.add_argument("--result", required=True)
    parser.add_argument("--seal", required=True)
    parser.add_argument("--certificate", default="keep", choices=["keep", "delete", "forge"])
    args = parser.parse_args()
    store = Store(f"chdb://{args.store}", database=DB)
    records = sorted(store.get_run_spans(args.run_id), key=lambda r: int(r.attributes[semconv.CHAIN_SEQ]))
    root = next(r for r in records if r.is_root)
    kid = root.attributes[semconv.IDENTITY_KID]
    agent_id = root.resource[semconv.AGENT_ID]

    rewritten = _rechain(records, args.result)
    key = None
    if args.seal == "fresh":
        key = identity.generate_key()
    elif args.seal != "strip":
        key = identity.load_private_key(args.seal)
        kid = identity.key_id(key)
    rewritten = [_sealed(r, key, kid, agent_id) if r.is_root else r for r in rewritten]
    _write_spans(store, args.run_id, rewritten)
    if args.seal == "fresh":
        assert key is not None
        _replace_key_row(store, kid, agent_id, key, args.certificate)
    store.close()


def _rechain(records: list[SpanRecord], result: str) -> list[SpanRecord]:
    out, prev = [], GENESIS_HASH
    for r in records:
        attrs = dict(r.attributes)
        if r.name.startswith("execute_tool"):
            attrs[semconv.GEN_AI_TOOL_CALL_RESULT] = result
        attrs[semconv.CHAIN_PREV] = prev
        edited = dataclasses.replace(r, attributes=attrs)
        prev = attrs[semconv.CHAIN_HASH] = link_hash(prev, edited)
        out.append(dataclasses.replace(r, attributes=attrs))
    return out


def _sealed(root: SpanRecord, key: identity.Ed25519PrivateKey | None, kid: str, agent_id: str) -> SpanRecord:
    attrs = {k: v for k, v in root.attributes.items() if k not in (semconv.CHAIN_SEAL, semconv.IDENTITY_KID)}
    if key is not None:
        payload = identity.seal_payload(
            run_id=root.trace_id, agent_id=agent_id, seq=int(attrs[semconv.CHAIN_SEQ]),
            last_hash=attrs[semconv.CHAIN_HASH], manifest_sha256=attrs.get(semconv.MANIFEST_SHA256, ""),
        )
        attrs[semconv.CHAIN_SEAL] = identity.sign(key, payload)
        attrs[semconv.IDENTITY_KID] = kid
    return dataclasses.replace(root, attributes=attrs)


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _write_spans(store: Store, run_id: str, records: list[SpanRecord]) -> None:
    """Replace every row of the run: a copy with the new attributes, the originals deleted."""
    store.command(f"CREATE TABLE {DB}.tampered AS {DB}.otel_traces")
    for r in records:
        pairs = ", ".join(f"{_literal(k)}, {_literal(v)}" for k, v in r.attributes.items())
        store.command(
            f"INSERT INTO {DB}.tampered SELECT * REPLACE (map({pairs}) AS SpanAttributes)"
            f" FROM {DB}.otel_traces WHERE TraceId = {_literal(run_id)} AND SpanId = {_literal(r.span_id)}"
        )
    store.command(f"ALTER TABLE {DB}.otel_traces DELETE WHERE TraceId = {_literal(run_id)} SETTINGS mutations_sync = 2")
    store.command(f"INSERT INTO {DB}.otel_traces SELECT * FROM {DB}.tampered")
    store.command(f"DROP TABLE {DB}.tampered")


def _replace_key_row(
    store: Store, kid: str, agent_id: str, key: identity.Ed25519PrivateKey, certificate: str
) -> None:
    public = base64.b64encode(identity.public_key_bytes(key.public_key())).decode("ascii")
    store.command(f"ALTER TABLE {DB}.agent_keys DELETE WHERE Kid = {_literal(kid)} SETTINGS mutations_sync = 2")
    store.command(
        f"INSERT INTO {DB}.agent_keys (Kid, AgentId, PublicKey, FirstSeen)"
        f" VALUES ({_literal(kid)}, {_literal(agent_id)}, {_literal(public)}, now64(9))"
    )
    if certificate == "keep":
        return
    store.command(
        f"ALTER TABLE {DB}.agent_certificates DELETE WHERE Kid = {_literal(kid)} SETTINGS mutations_sync = 2"
    )
    if certificate == "forge":  # a token for the new key, from an "org" key the attacker made
        token = identity.issue_identity(
            org_key=identity.generate_key(), agent_id=agent_id, agent_public_key=key.public_key(),
            now=int(time.time()),
        )
        store.command(
            f"INSERT INTO {DB}.agent_certificates (Kid, AgentId, Certificate, FirstSeen)"
            f" VALUES ({_literal(kid)}, {_literal(agent_id)}, {_literal(token)}, now64(9))"
        )


if __name__ == "__main__":
    main()
