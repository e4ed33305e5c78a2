"""Replay of a recorded 1,000-step run: recording vs replaying wall time, and the load from the store.

One run, same machine: a collector on chDB, the local model server in its own process, the
agent (``bench/agents/long_agent.py``) under ``opentelemetry-instrument``. Measured:

* ``record_s``: the agent's own wall time while recording (live calls to the model server);
* ``replay_s``: the agent's own wall time in strict replay (answers from the recording);
* ``load_s``: reading the run from the store through the collector, verifying its chain,
  and building the recording the replay needs;
* ``process_*_s``: the same for the whole process (interpreter and launcher start-up included);
* ``library_s``: the same agent with no instrumentation and every call answered in process
  (the model server's response, saved once): the agent's own work with the OpenAI client alone.
  A replay runs the client library as the agent does, so ``library_to_record`` is the floor
  under ``replay_to_record`` for any replay that does.

Goal: replay faster than recording (``replay_to_record`` < 1) and the load under 10% of the replay.
Prints JSON and writes ``bench/results/replay.json``.

    python bench/replay_bench.py [--steps 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from agentreplay_dev.collector import CollectorProcess, write_config
from agentreplay_otel.chain import verify
from agentreplay_otel.recording import recording_from_spans
from agentreplay_otel.replay import ENV_REPLAY, ENV_REPLAY_REPORT, Plan, bundle

HERE = Path(__file__).parent
AGENT = HERE / "agents" / "long_agent.py"
RESULTS = HERE / "results" / "replay.json"
BIN = Path(sys.executable).parent


def run_agent(env: dict[str, str], steps: int, *, answer: Path | None = None) -> tuple[float, float]:
    """The agent under the launcher; with ``answer``, alone (no launcher) and answered in process."""
    started = time.perf_counter()
    command = [sys.executable, str(AGENT), "--steps", str(steps)]
    if answer is not None:
        command += ["--answer", str(answer)]
    else:
        command.insert(0, str(BIN / "opentelemetry-instrument"))
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    total = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])["agent_s"], total


def save_answer(base_url: str, path: Path) -> None:
    """The model server's response to a request like the agent's, saved for in-process answers."""
    import httpx2

    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Where is order 1?"}]}
    response = httpx2.post(f"{base_url}/chat/completions", json=body, timeout=30)
    response.raise_for_status()
    headers = {k: v for k, v in response.headers.items()
               if k.lower() not in ("content-length", "content-encoding", "transfer-encoding", "connection")}
    path.write_text(json.dumps({"headers": headers, "body": response.text}))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1000)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        config = write_config(tmp / "collector.yaml", store=f"chdb://{tmp / 'store'}")
        model = subprocess.Popen([sys.executable, "-m", "agentreplay_dev.llm_server"],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert model.stdout is not None
        base = model.stdout.readline().strip()
        try:
            with CollectorProcess(config) as collector:
                env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTREPLAY_"))} | {
                    "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{collector.grpc}", "OTEL_EXPORTER_OTLP_INSECURE": "true",
                    "OPENAI_BASE_URL": f"{base}/v1",
                }
                record_s, process_record_s = run_agent(env, args.steps)
                with collector.client() as client:
                    run_id = client.list_runs(limit=1)[0].run_id
                    started = time.perf_counter()
                    spans = client.get_run_spans(run_id)
                    report = verify(spans, keys=client.get_agent_key)
                    recording = recording_from_spans(spans)
                    load_s = time.perf_counter() - started
                assert report.intact, report
                (tmp / "bundle.json").write_text(bundle(recording, Plan()))
                replay_env = env | {ENV_REPLAY: str(tmp / "bundle.json"), ENV_REPLAY_REPORT: str(tmp / "report.json")}
                replay_s, process_replay_s = run_agent(replay_env, args.steps)
                outcome = json.loads((tmp / "report.json").read_text())
                save_answer(f"{base}/v1", tmp / "answer.json")
                library_s, _ = run_agent(env, args.steps, answer=tmp / "answer.json")
        finally:
            model.terminate()
            model.wait(timeout=10)
    assert outcome["outcome"] == "matched" and outcome["live_calls"] == 0, outcome
    result = {
        "steps": len(recording.steps),
        "spans": len(spans),
        "record_s": round(record_s, 3),
        "replay_s": round(replay_s, 3),
        "replay_to_record": round(replay_s / record_s, 3),
        "library_s": round(library_s, 3),
        "library_to_record": round(library_s / record_s, 3),
        "replay_to_library": round(replay_s / library_s, 3),
        "load_s": round(load_s, 4),
        "load_to_replay": round(load_s / replay_s, 3),
        "process_record_s": round(process_record_s, 3),
        "process_replay_s": round(process_replay_s, 3),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
