"""``agentreplay-collector --config otel-collector.yaml [--validate]``, and
``agentreplay-collector copy --from STORE --to URL`` (:mod:`.storecopy`)."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import sys

# grpcio's core logs each failed TLS handshake at info level, one line a stranger's connection: errors
# only (the operator may still ask for more), so that strangers cannot fill the log.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

from agentreplay_client.errors import ConfigError
from agentreplay_collector.config import load_config, parse_duration


def copy_main(argv: list[str]) -> int:
    """``copy``: a store's tables into another ClickHouse (a server for Grafana). Exit 0 copied, 2 not."""
    from agentreplay_client.reader import DEFAULT_DATABASE, DEFAULT_STORE
    from agentreplay_collector import storecopy

    parser = argparse.ArgumentParser(
        prog="agentreplay-collector copy",
        description="Copy a store (by default the embedded one) into a ClickHouse server: creates the schema "
        "there, then copies every table in batches. Stop the collector that holds the store first.",
    )
    parser.add_argument("--from", dest="source", default=DEFAULT_STORE,
                        help=f"the store: a chDB directory or chdb://DIR (default {DEFAULT_STORE})")
    parser.add_argument("--to", dest="target", required=True,
                        help="the target: http(s)://USER:PASSWORD@HOST:8123/?database=NAME, or chdb://DIR")
    parser.add_argument("--database", default=DEFAULT_DATABASE,
                        help=f"the store's database (default {DEFAULT_DATABASE}; the target's is in --to, "
                        "else the same)")
    parser.add_argument("--cluster", default=None,
                        help="create the target's tables ON CLUSTER (the collector's clickhouse.cluster_name)")
    parser.add_argument("--ttl", default="0", help="the tables' TTL where the copy creates them, as the collector's "
                        "clickhouse.ttl (e.g. 720h; default none)")
    parser.add_argument("--append", action="store_true",
                        help="into a target that already holds rows: copy only the rows it lacks (resumes an "
                        "interrupted copy; copying again copies nothing twice)")
    parser.add_argument("--batch-rows", type=int, default=65_536, help="rows per insert (default 65536)")
    args = parser.parse_args(argv)

    # clickhouse-connect logs a failed request before raising it; the raised error is what is said, once
    logging.getLogger("clickhouse_connect").setLevel(logging.CRITICAL)

    def progress(line: str) -> None:
        print(f"copy: {line}", file=sys.stderr, flush=True)

    ttl_s = parse_duration(args.ttl)
    if ttl_s is None or ttl_s < 0:
        print(f"agentreplay-collector copy: --ttl {args.ttl}: not a duration (e.g. 720h)", file=sys.stderr)
        return 2
    try:
        source = storecopy.parse_endpoint(args.source, args.database)
        target = storecopy.parse_endpoint(args.target, args.database)
        copies = storecopy.copy_store(source, target, cluster=args.cluster, ttl_s=int(ttl_s), append=args.append,
                                      batch_rows=max(1, args.batch_rows), progress=progress)
    except storecopy.CopyError as exc:
        print(f"agentreplay-collector copy: {exc}", file=sys.stderr)
        return 2
    print(storecopy.summary(copies))
    print(f"copied to {target.shown}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["copy"]:
        return copy_main(argv[1:])
    parser = argparse.ArgumentParser(
        prog="agentreplay-collector",
        description="OTLP collector for AgentReplay: verifies hash chains and writes runs to ClickHouse or chDB. "
        "`agentreplay-collector copy --help`: copy a store into a ClickHouse server.",
    )
    parser.add_argument(
        "--config", default="otel-collector.yaml", help="config file (OpenTelemetry Collector grammar)"
    )
    parser.add_argument("--validate", action="store_true", help="check the config and exit 0 (valid) or 1")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"agentreplay-collector: invalid config {args.config}: {exc}", file=sys.stderr)
        return 1
    if args.validate:
        print(f"agentreplay-collector: {args.config} is valid")
        return 0
    logging.basicConfig(
        level=config.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # The request path allocates many short-lived objects and no cycles worth collecting
    # often: a higher first-generation threshold saves ~15% of the conversion time.
    gc.set_threshold(50_000, 20, 20)
    # Exports are parsed on threads of their own; the event loop answering Authorize waits for the
    # GIL at most one switch interval (5 ms by default) while one of them holds it.
    sys.setswitchinterval(0.0005)
    from agentreplay_collector.service import Collector

    try:
        asyncio.run(Collector(config).serve_forever())
    except OSError as exc:
        logging.getLogger("agentreplay_collector").error("cannot start: %s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
