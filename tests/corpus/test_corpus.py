"""Replay fidelity on real agents: a corpus of programs written the way the SDKs' users write them.

Each program is recorded through the real launcher into a real collector (auth on, embedded store)
against a model server scripted for it, verified with `agentreplay verify`, and replayed with
`agentreplay replay` after that model server has stopped: the replay must match, make zero live
calls, run zero tool bodies (the tool log does not grow) and print what the recorded run printed.
A changed prompt must diverge at the step whose request carries it.

The programs run two at a time (each a chain of subprocesses), once per module; the tests then
judge what each one did.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from corpus_programs import PROGRAMS
from corpuskit import CorpusWorld, Outcome, Program, corpus_world

pytestmark = pytest.mark.e2e
WORKERS = 2


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CorpusWorld]:
    with corpus_world(Path(tmp_path_factory.mktemp("corpus"))) as world:
        yield world


@pytest.fixture(scope="module")
def outcomes(world: CorpusWorld, request: pytest.FixtureRequest) -> dict[str, Outcome | BaseException]:
    """Every program this session selected, run once; a program that failed keeps its exception."""
    selected = {
        item.callspec.params["program"].name
        for item in request.session.items
        if item.module is request.module and hasattr(item, "callspec") and "program" in item.callspec.params
    }

    def run(program: Program) -> Outcome | BaseException:
        try:
            return world.run(program)
        except Exception as exc:  # noqa: BLE001 - reported by the program's own tests
            return exc

    chosen = [p for p in PROGRAMS if p.name in selected]
    with ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="corpus") as pool:
        return dict(zip([p.name for p in chosen], pool.map(run, chosen), strict=True))


def outcome_of(outcomes: dict[str, Outcome | BaseException], program: Program) -> Outcome:
    found = outcomes[program.name]
    if isinstance(found, BaseException):
        raise found
    return found


def _param(program: Program, *, known: bool) -> object:
    strict = not program.intermittent
    marks = [pytest.mark.xfail(strict=strict, reason=program.xfail)] if known and program.xfail else []
    return pytest.param(program, id=program.name, marks=marks)


@pytest.mark.parametrize("program", [_param(p, known=False) for p in PROGRAMS])
def test_program_is_recorded_and_verifies(outcomes: dict, program: Program) -> None:
    outcome = outcome_of(outcomes, program)
    recorded = outcome.recorded
    assert program.expect in recorded.stdout, recorded.stdout
    assert recorded.model_requests > 0
    assert outcome.chain["intact"] and outcome.chain["seal"] == "valid", outcome.chain


@pytest.mark.parametrize("program", [_param(p, known=True) for p in PROGRAMS])
def test_program_replays_identically(outcomes: dict, program: Program) -> None:
    outcome = outcome_of(outcomes, program)
    replayed = outcome.replayed
    assert replayed.report.get("outcome") == "matched", replayed.explain()
    assert replayed.exit_code == 0, replayed.explain()
    assert replayed.report["live_calls"] == 0 and replayed.report["blocked_connections"] == 0
    assert outcome.side_effects_after_replay == program.side_effects, "a tool body ran during the replay"
    # with --json the agent's output passes through on stderr (its stdout too), as recorded: exactly, or
    # for a program that also wrote to stderr (a deprecation warning), each stream whole and in order
    recorded = outcome.recorded
    if recorded.stderr:
        assert recorded.stdout in replayed.stderr and recorded.stderr in replayed.stderr, replayed.stderr
    else:
        assert replayed.stderr == recorded.stdout, replayed.stderr


@pytest.mark.parametrize("program", [_param(p, known=False) for p in PROGRAMS if p.changed_prompt])
def test_changed_prompt_diverges_at_its_step(outcomes: dict, program: Program) -> None:
    outcome = outcome_of(outcomes, program)
    assert program.changed_prompt is not None and outcome.changed is not None
    step, field = program.changed_prompt
    changed = outcome.changed
    assert changed.exit_code == 1, changed.explain()
    divergence = changed.report["divergence"]
    assert (divergence["step"], divergence["reason"]) == (step, "request-differs"), changed.explain()
    assert field in [f["path"] for f in divergence["fields"]], changed.explain()
    assert changed.report["live_calls"] == 0
    assert outcome.recorded.side_effects() == program.side_effects
