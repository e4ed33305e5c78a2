"""What proof of possession costs, in CPU per request, on each side; prints JSON.

An agent signs one proof per export batch and per Authorize (:mod:`agentreplay_otel.proof`); the
collector verifies it and spends its id once (:class:`agentreplay_collector.auth.AuthProcessor`).
Measured in one process, each against its baseline in the same run:

* agent: a proof (claims, one Ed25519 signature, the JWS) per request, against serializing and
  sending nothing more: the figure is the CPU added per export or Authorize;
* collector: ``authenticate`` with the proof (the cached certificate, one Ed25519 verification, the
  single-use ledger, the body digest) against the bearer check it replaces (the cached token alone).

    .venv/bin/python bench/proof_bench.py [--rounds 5000] [--body-kb 64] > bench/results/proof.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from agentreplay_collector.auth import AuthProcessor, KeyRing, Presented
from agentreplay_collector.config import AuthConfig
from agentreplay_otel import identity, proof


def cpu_us(fn: Callable[[int], object], rounds: int, repeats: int = 5) -> dict[str, float]:
    """Median and spread over ``repeats`` of the process CPU per call (µs)."""
    samples = []
    for _ in range(repeats):
        start = time.process_time()
        for i in range(rounds):
            fn(i)
        samples.append((time.process_time() - start) / rounds * 1e6)
    return {"median_us": round(statistics.median(samples), 2), "min_us": round(min(samples), 2),
            "max_us": round(max(samples), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5000)
    parser.add_argument("--body-kb", type=int, default=64, help="the export body the proof covers")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="proof-bench-"))
    org, agent = identity.generate_key(), identity.generate_key()
    identity.write_public_key(org.public_key(), tmp / "org.pub")
    token = identity.issue_identity(org_key=org, agent_id="bench", agent_public_key=agent.public_key())
    prover = proof.Prover(token, agent)
    body = bytes(range(256)) * (args.body_kb * 4)
    authorize_body = json.dumps({"kind": "tool", "tool": "lookup", "run_id": "ab" * 16}).encode()

    sign_export = cpu_us(lambda i: prover.proof("POST", "/v1/traces", body), args.rounds)
    sign_authorize = cpu_us(lambda i: prover.proof("POST", "/v1/authorize", authorize_body), args.rounds)
    digest_only = cpu_us(lambda i: proof.digest(body), args.rounds)

    auth = AuthProcessor(AuthConfig(org_public_key=tmp / "org.pub", proof_ledger_size=10 * args.rounds), KeyRing())
    bearer = f"Bearer {token}"
    auth._identity(bearer)  # the certificate cached, as after an agent's first request
    headers = [prover.headers("POST", "/v1/traces", body, lower=True) for _ in range(6 * args.rounds)]
    fresh = iter(headers)

    def with_proof(_: int) -> None:
        presented = Presented.from_headers(next(fresh).get, "POST", "/v1/traces")
        who = auth.authenticate(presented)
        assert who is not None
        who.check_body(body)

    verify = cpu_us(with_proof, args.rounds)
    bearer_only = cpu_us(lambda i: auth._identity(bearer), args.rounds)  # what the check was before
    result = {
        "benchmark": "proof_of_possession",
        "rounds": args.rounds,
        "export_body_bytes": len(body),
        "agent": {
            "proof_per_export_us": sign_export,
            "proof_per_authorize_us": sign_authorize,
            "of_which_body_digest_us": digest_only,
        },
        "collector": {
            "authenticate_with_proof_us": verify,
            "bearer_token_check_before_us": bearer_only,
            "added_per_request_us": round(verify["median_us"] - bearer_only["median_us"], 2),
        },
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
