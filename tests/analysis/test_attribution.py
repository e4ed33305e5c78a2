"""Blame in group chats of agents (AutoGen / CaptainAgent, as Who&When records them), read from what the
messages say: code that failed is its author's, not the executor's; retries of failing code are one failure;
success claimed after it is FM-3.3; made-up data; a task handed on that is not the one asked. The chats are
small synthetic records in the benchmark's format (``whowhen_fixtures/``), converted into AutoGen-shaped
GenAI spans by ``bench/whowhen.py`` and read as any foreign trace."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agentreplay_analysis import Outcome, detect, run_view
from agentreplay_analysis.attribution import blame, turns

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent.parent / "bench"))

import whowhen  # noqa: E402 - the converter lives with the bench

FIXTURES = HERE / "whowhen_fixtures"


def _record(name: str) -> whowhen.Record:
    return next(r for r in whowhen.load(FIXTURES) if r.name == name)


def _view(record: whowhen.Record):  # type: ignore[no-untyped-def]
    return run_view(whowhen.spans(record).spans)


def test_the_converter_makes_one_step_per_message_with_the_agent_s_name() -> None:
    record = _record("1.json")
    chat = whowhen.spans(record)
    view = run_view(chat.spans)
    assert view.foreign and len(view.steps) == len(record.history)
    assert chat.history_index == {i: i for i in range(len(record.history))}
    assert [s.agent for s in view.steps] == [m["name"] for m in record.history]
    assert [s.kind for s in view.steps][:4] == ["llm", "llm", "llm", "tool"]
    assert view.request is not None and view.request.text == record.question
    assert view.steps[3].result.startswith("exitcode: 1 (execution failed)")


@pytest.mark.parametrize(("name", "kind"), [("1.json", "code_failed"), ("2.json", "made_up"), ("3.json", "handed_on")])
def test_blame_names_the_labelled_agent_and_step(name: str, kind: str) -> None:
    record = _record(name)
    found = blame(_view(record))
    assert found is not None
    assert (found.agent, found.step, found.kind) == (record.mistake_agent, record.mistake_step, kind)
    assert found.reason and found.evidence


def test_failed_code_is_its_author_s_retries_are_one_failure_and_a_claim_of_success_is_fm_3_3() -> None:
    verdict = detect(_view(_record("1.json")))
    assert verdict.outcome == Outcome.FAILED
    assert verdict.culprit is not None and verdict.culprit.step == 2  # Coder_Expert wrote it, not Computer_terminal
    assert verdict.mode_ids == ("FM-3.3",) and len(verdict.modes) == 2
    main = verdict.modes[0]
    assert "Coder_Expert" in main.explanation and "counted as this one failure" in main.explanation
    assert verdict.modes[1].culprit is not None and verdict.modes[1].culprit.step == 6  # the verifier's claim
    assert "FM-1.3" not in verdict.mode_ids  # retrying failing code is no loop


def test_made_up_data_and_a_task_handed_on_fail_the_run_at_their_step() -> None:
    made_up = detect(_view(_record("2.json")))
    assert made_up.outcome == Outcome.FAILED and made_up.culprit is not None and made_up.culprit.step == 2
    assert made_up.mode_ids[0] == "FM-1.1" and "made-up data" in made_up.modes[0].explanation
    handed = detect(_view(_record("3.json")))
    assert handed.outcome == Outcome.FAILED and handed.culprit is not None and handed.culprit.step == 0
    assert "is not the one asked" in handed.modes[0].explanation


def test_a_chat_whose_code_ran_and_checked_out_is_not_failed_and_blame_still_names_a_first_contribution() -> None:
    record = _record("1.json")
    ok = "exitcode: 0 (execution succeeded)\nCode output: 42\n"
    history = (*record.history[:3], {**record.history[3], "content": ok},
               {**record.history[6], "content": "The count is 42.\n\nTERMINATE"})
    healthy = whowhen.Record(**{**record.__dict__, "history": history})
    view = _view(healthy)
    assert turns(view) is not None
    verdict = detect(view)
    assert verdict.outcome != Outcome.FAILED and not verdict.modes
    found = blame(view)  # told the run failed, it names the first turn the answer rests on
    assert found is not None and found.kind == "unsupported" and found.step == 1


def test_a_run_with_one_agent_calling_tools_is_no_group_chat() -> None:
    record = _record("2.json")
    alone = whowhen.Record(**{**record.__dict__, "history": record.history[:1], "system_prompts": {}})
    assert turns(_view(alone)) is None and blame(_view(alone)) is None
