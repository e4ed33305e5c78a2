"""A tool that is a method replays: ``self``/``cls`` and what a framework injects are the tool's owner,
recorded by type, never matched by value; an argument held only as a repr with an address is matched by
type. Recorded in one process and replayed in another (every address differs). And a request the replay
refused, retried by a framework, is refused alike, with no second error."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import openai
import pytest
from tenacity import Retrying, stop_after_attempt, wait_none

import agentreplay_otel
from agentreplay_dev.llm_server import LLMServer, ScriptedReply
from agentreplay_otel import semconv, tools
from agentreplay_otel.replay import Plan, ReplayDivergence, ReplaySession, install

AGENT = textwrap.dedent('''
    """Tools that are methods, recorded (argv: record OUT) or replayed (argv: replay RECORDING REPORT)."""
    import json
    import sys
    from pathlib import Path

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import agentreplay_otel
    from agentreplay_dev.providers import swap_global_tracer_provider
    from agentreplay_otel import identity, replay
    from agentreplay_otel.chain import ChainSpanProcessor, record_from_span
    from agentreplay_otel.recording import Recording, recording_from_spans

    RAN = []


    class Connection:
        """What a tool's owner holds: its repr has this process's address."""


    class RunContext:
        """Stands for a framework's injected context (pydantic-ai's RunContext, by its annotation)."""

        def __init__(self):
            self.connection = Connection()


    class Shipping:
        def __init__(self):
            self.connection = Connection()

        @agentreplay_otel.tool
        def quote(self, parcel: str, weight_kg: float) -> dict:
            RAN.append("quote")
            return {"parcel": parcel, "price": 4.5 * weight_kg}

        @classmethod
        @agentreplay_otel.tool
        def zones(cls, country: str) -> list:
            RAN.append("zones")
            return [country + "-1", country + "-2"]

        @agentreplay_otel.tool
        @classmethod
        def carriers(cls, country: str) -> list:
            RAN.append("carriers")
            return ["DHL", country]

        @agentreplay_otel.tool
        def track(self, ctx: "RunContext", parcel: str, via: object) -> str:
            RAN.append("track")
            return parcel + " in transit"


    def agent():
        shipping = Shipping()
        return [shipping.quote("P-1", 2.0), Shipping.zones("PT"), shipping.zones("ES"), Shipping.carriers("FR"),
                shipping.track(RunContext(), "P-1", Connection())]


    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(ChainSpanProcessor(SimpleSpanProcessor(exporter), signing_key=identity.generate_key()))
    swap_global_tracer_provider(provider)
    if sys.argv[1] == "replay":
        session = replay.ReplaySession(Recording.from_json(Path(sys.argv[2]).read_text()), replay.Plan())
        replay.install(session)
    with agentreplay_otel.run("shipper"):
        result = agent()
    provider.force_flush()
    if sys.argv[1] == "record":
        recording = recording_from_spans([record_from_span(s) for s in exporter.get_finished_spans()])
        Path(sys.argv[2]).write_text(recording.to_json())
    else:
        Path(sys.argv[3]).write_text(session.finish().to_json())
    print(json.dumps({"result": result, "ran": RAN, "address": hex(id(Connection()))}))
''')


def _agent(tmp_path: Path, *args: str) -> tuple[dict, str]:
    script = tmp_path / "shipper.py"
    script.write_text(AGENT)
    done = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_method_and_classmethod_tools_record_in_one_process_and_replay_in_another(tmp_path: Path):
    recording_path, report_path = tmp_path / "recording.json", tmp_path / "report.json"
    recorded, record_err = _agent(tmp_path, "record", str(recording_path))
    replayed, _ = _agent(tmp_path, "replay", str(recording_path), str(report_path))
    assert recorded["ran"] == ["quote", "zones", "zones", "carriers", "track"]
    assert replayed["ran"] == []  # no body ran
    assert replayed["result"] == recorded["result"]
    report = json.loads(report_path.read_text())
    assert report["outcome"] == "matched" and report["divergence"] is None
    assert report["steps_matched"] == report["steps_recorded"] == 5
    steps = json.loads(recording_path.read_text())["steps"]
    assert [s["request"] for s in steps] == [
        {"parcel": "P-1", "weight_kg": 2.0}, {"country": "PT"}, {"country": "ES"}, {"country": "FR"},
        {"parcel": "P-1", "via": "<__main__:Connection>"},  # the address-only argument, by its type
    ]
    said = [line for line in record_err.splitlines() if "memory address" in line]
    assert len(said) == 1 and "'track'" in said[0] and "via" in said[0]


class Store:
    """A tool's owner: its state is not an argument."""

    def __init__(self, region: str) -> None:
        self.region = region

    @agentreplay_otel.tool(cost=lambda self, seats: 10.0 * seats)
    def book(self, seats: int) -> dict:
        return {"seats": seats, "region": self.region}

    @classmethod
    @agentreplay_otel.tool
    def opening(cls, day: str) -> str:
        return f"{cls.__name__} opens {day}"


def test_the_owner_is_recorded_by_type_and_the_arguments_without_it(recorder):
    _, recording, spans = recorder.record_run(lambda: (Store("eu").book(2), Store.opening("mon")))
    book, opening = (next(s for s in spans if s.attributes.get(semconv.GEN_AI_TOOL_NAME) == name)
                     for name in ("book", "opening"))
    assert json.loads(book.attributes[semconv.GEN_AI_TOOL_CALL_ARGUMENTS]) == {"seats": 2}
    assert json.loads(book.attributes[semconv.TOOL_OWNER]) == {"self": f"{__name__}:Store"}
    assert json.loads(opening.attributes[semconv.TOOL_OWNER]) == {"cls": f"{__name__}:Store"}
    assert float(book.attributes[semconv.COST_USD]) == 20.0  # a cost function that names self still gets it


def test_injected_parameters_are_owners_by_annotation():
    def tool_body(ctx: RunContextWrapper, kernel: Kernel, query: str, config: RunnableConfig | None = None) -> None:  # noqa: F821
        ...

    assert tools.owner_parameters(inspect.signature(tool_body)) == {"ctx", "kernel", "config"}

    def plain(self_service: str, query: str) -> None: ...

    assert tools.owner_parameters(inspect.signature(plain)) == frozenset()


# --- a refused request stays refused -------------------------------------------------------------
def test_a_retried_refused_request_gets_the_same_refusal_and_no_second_error(instrumented):
    with LLMServer([ScriptedReply(text="Booked.")]) as server:
        client = openai.OpenAI(base_url=server.base_url_openai, api_key="t", max_retries=0)

        def ask(prompt: str) -> str:
            reply = client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": prompt}])
            return reply.choices[0].message.content or ""

        _, recording, _ = instrumented.record_run(lambda: ask("Book Friday"))
        session = ReplaySession(recording, Plan())
        install(session)
        count = server.request_count
        refusals: list[ReplayDivergence] = []

        def with_retries() -> str:  # as Griptape's prompt driver retries (tenacity)
            for attempt in Retrying(stop=stop_after_attempt(3), wait=wait_none(), reraise=True):
                with attempt:
                    try:
                        return ask("Book Saturday")
                    except ReplayDivergence as exc:
                        refusals.append(exc)
                        raise
            raise AssertionError("unreachable")

        with pytest.raises(ReplayDivergence):
            instrumented.record_run(with_retries)
        assert server.request_count == count
    assert len(refusals) == 3
    assert len({str(r) for r in refusals}) == 1 and "beyond the end" not in str(refusals[-1])
    assert all(r.divergence is refusals[0].divergence for r in refusals)
    report = session.finish()
    assert report.divergence.reason == "request-differs" and report.divergence.step == 0
    assert report.steps_replayed == 1


RUNS = {"charge": 0}


@agentreplay_otel.tool(side_effect=True)
def charge(order: str, amount: float) -> dict:
    RUNS["charge"] += 1
    return {"order": order, "charged": amount}


def test_a_retried_refused_tool_call_gets_the_same_refusal(instrumented):
    _, recording, _ = instrumented.record_run(lambda: charge("A-1", 10.0))
    session = ReplaySession(recording, Plan())
    install(session)
    refusals: list[str] = []

    def with_retries() -> None:
        for _ in range(3):
            try:
                charge("A-1", 99.0)
            except ReplayDivergence as exc:
                refusals.append(str(exc))

    instrumented.record_run(with_retries)
    assert len(refusals) == 3 and len(set(refusals)) == 1 and "differs" in refusals[0]
    assert RUNS["charge"] == 1
    assert session.finish().divergence.reason == "request-differs"
