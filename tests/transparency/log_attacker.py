"""What someone with write access to the store does to the transparency log, with direct SQL.

    python log_attacker.py STORE delete-run RUN_ID        the run's spans, its row and its leaf
    python log_attacker.py STORE edit-leaf RUN_ID         its leaf says another verdict
    python log_attacker.py STORE truncate K               leaves from K on, their tree hashes, later checkpoints
    python log_attacker.py STORE roll-back K              leaves from K on and their tree hashes (an old backup)
    python log_attacker.py STORE rewrite-without RUN_ID   the log rebuilt without the run, as the project's
                                                          own code would build it (no checkpoints kept)
    python log_attacker.py STORE forge-checkpoint         a larger checkpoint, signed by a key of its own
    python log_attacker.py STORE cut-tail RUN_ID          the run's last span (and its seal) deleted
"""

from __future__ import annotations

import argparse
import time

from agentreplay_client.models import LogEntry
from agentreplay_collector.store import Store, schema
from agentreplay_otel.core import (
    Checkpoint,
    certify_log_key,
    generate_key,
    key_id,
    merkle,
    semconv,
    sign_checkpoint,
)

DB = "agentreplay"
SYNC = " SETTINGS mutations_sync = 2"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("store")
    parser.add_argument("attack", choices=["delete-run", "edit-leaf", "truncate", "roll-back", "rewrite-without", "forge-checkpoint",
                                           "cut-tail"])
    parser.add_argument("target", nargs="?", default="")
    args = parser.parse_args()
    store = Store(f"chdb://{args.store}", database=DB)
    {"delete-run": delete_run, "edit-leaf": edit_leaf, "truncate": truncate, "rewrite-without": rewrite_without,
     "forge-checkpoint": forge_checkpoint, "cut-tail": cut_tail, "roll-back": roll_back}[args.attack](store, args.target)
    store.close()


def table(name: str) -> str:
    return f"{DB}.{name}"


def delete_run(store: Store, run_id: str) -> None:
    store.command(f"ALTER TABLE {table(schema.TRACES)} DELETE WHERE TraceId = '{run_id}'{SYNC}")
    store.command(f"ALTER TABLE {table(schema.RUNS)} DELETE WHERE RunId = '{run_id}'{SYNC}")
    store.command(f"ALTER TABLE {table(schema.LOG_LEAVES)} DELETE WHERE RunId = '{run_id}'{SYNC}")


def edit_leaf(store: Store, run_id: str) -> None:
    store.command(
        f"ALTER TABLE {table(schema.LOG_LEAVES)} UPDATE Leaf = replaceOne(Leaf, '\"verdict\":\"intact\"',"
        f" '\"verdict\":\"broken\"') WHERE RunId = '{run_id}'{SYNC}"
    )


def truncate(store: Store, size: str) -> None:
    roll_back(store, size)
    store.command(f"ALTER TABLE {table(schema.LOG_CHECKPOINTS)} DELETE WHERE TreeSize > {int(size)}{SYNC}")


def roll_back(store: Store, size: str) -> None:
    k = int(size)
    store.command(f"ALTER TABLE {table(schema.LOG_LEAVES)} DELETE WHERE LeafIndex >= {k}{SYNC}")
    store.command(f"ALTER TABLE {table(schema.LOG_NODES)} DELETE WHERE bitShiftLeft(Idx + 1, Level) > {k}{SYNC}")


def rewrite_without(store: Store, run_id: str) -> None:
    kept = [e for e in store.log.entries(0, store.log.size()) if e.run_id != run_id]
    delete_run(store, run_id)
    for name in (schema.LOG_LEAVES, schema.LOG_NODES, schema.LOG_CHECKPOINTS):
        store.command(f"TRUNCATE TABLE {table(name)}")
    frontier, nodes, entries = merkle.Frontier(), [], []
    for i, e in enumerate(kept):
        entries.append(LogEntry(index=i, leaf=e.leaf, logged_ns=e.logged_ns))
        nodes.extend(frontier.append(merkle.leaf_hash(e.leaf)))
    store.log.append(nodes, entries, time.time_ns())


def forge_checkpoint(store: Store, _: str) -> None:
    rogue = generate_key()
    latest = store.log.checkpoint()
    size = (latest.checkpoint.size if latest else 0) + 1
    cp = Checkpoint(size=size, root=b"\x13" * 32, time_ns=time.time_ns(), kid=key_id(rogue))
    store.log.insert_checkpoint(sign_checkpoint(cp, rogue, certify_log_key(rogue, rogue.public_key())))


def cut_tail(store: Store, run_id: str) -> None:
    last = max(store.get_run_spans(run_id), key=lambda r: int(r.attributes[semconv.CHAIN_SEQ]))
    store.command(f"ALTER TABLE {table(schema.TRACES)} DELETE WHERE SpanId = '{last.span_id}'{SYNC}")


if __name__ == "__main__":
    main()
