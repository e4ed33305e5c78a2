"""A recorded run becomes a regression test: a short pytest file and the case beside it.

The test runs the current agent code on the run's recorded input through the pytest plugin
(:mod:`agentreplay_replay.pytest_plugin`: regression mode, recorded answers until the first
divergence, then the model endpoint given for tests, tools always sandboxed) and asserts:

* structural: only tools the manifest lists, per-tool counts within it, every call allowed by
  it (no scope violation), no halt, a step bound, no uncaught exception;
* semantic: each failure the run's analysis found becomes an assertion; a task-specification
  failure on an argument (FM-1.1) becomes a check of that argument against what the request
  states (booked day == requested day); any other mode, "the analysis no longer finds it";
* for a run with no failure: its actions (side-effect tool calls) are pinned as recorded;
* for a run with an expected outcome (set with ``agentreplay expect``, given to ``testgen --expect``, or
  recorded by the run): the regression run's outcome must meet it (FM-1.1), compared as the analysis
  compares (:mod:`agentreplay_analysis.expected`).

Each assertion is tagged with its MAST mode (``@pytest.mark.mast``, and in its message). The
literals are written into the test, so a person reads what it expects without the case.

A run recorded without keys gets its test too: the docstring's first line says it is UNSIGNED and
not evidence, and the test checks the case's chain links alone (there is no seal to check).
"""

from __future__ import annotations

import keyword
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentreplay_analysis import Verdict, evidence
from agentreplay_analysis.constraints import Kind, mentions
from agentreplay_analysis.expected import DETECTOR as EXPECTED_DETECTOR
from agentreplay_analysis.expected import parse as parse_expected
from agentreplay_analysis.taxonomy import BY_ID
from agentreplay_analysis.transcript import run_view
from agentreplay_analysis.verdict import ModeHit
from agentreplay_incident import case as casefile
from agentreplay_otel.core import KIND_TOOL, TRACE_ID_FORM, RecordedStep, is_trace_id, semconv

STEP_BOUND_FACTOR = 2
"""The step bound: this many times the recorded run's steps (an agent that loops is FM-1.5)."""
STEP_BOUND_MIN = 10
TASK_SPEC = "FM-1.1"
ROLE_SPEC = "FM-1.2"
TERMINATION = "FM-1.5"
PREMATURE = "FM-3.1"
_ARGUMENTS = semconv.GEN_AI_TOOL_CALL_ARGUMENTS + "."


class TestgenError(Exception):
    """No test can be written for this case (it does not check, or it holds no run to replay)."""

    __test__ = False  # not a test class, whatever pytest's name rules say


@dataclass(frozen=True, kw_only=True)
class Check:
    """One generated test function: its name, the MAST mode it guards, why, and its body."""

    name: str
    mode: str  # a MAST id; "" when it guards against any mode
    doc: str
    body: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Generated:
    test: Path
    case: Path
    checks: tuple[Check, ...]


# --- naming -----------------------------------------------------------------------------------------
def _slug(text: str, default: str = "agent") -> str:
    slug = re.sub(r"[^0-9a-zA-Z]+", "_", text).strip("_").lower()
    return slug or default


def agent_name(case: casefile.Case) -> str:
    return _slug(case.summary.agent_id or case.summary.agent_name or case.recording.agent_id)


def file_names(case: casefile.Case) -> tuple[str, str]:
    """``test_<agent>_<short run id>.py`` and its case file's name."""
    stem = f"{agent_name(case)}_{case.run_id[:8]}"
    return f"test_{stem}.py", f"{stem}.case.json"


_TAKEN = frozenset({"regression", "problem", "unlisted", "pytest", "Path", "CASE", "str", "len", "dict", "c"})
"""Names the generated code uses itself: a variable named after a recorded argument is never one of them."""


def _identifier(text: str) -> str:
    name = _slug(text, "value")
    name = f"v_{name}" if name[0].isdigit() else name
    return f"{name}_" if keyword.iskeyword(name) else name


# --- literals in the generated code ---------------------------------------------------------------------
# Every recorded value (tool names, arguments, models, agent names, messages, ids) reaches the test only
# through _escaped: inside a double-quoted literal or a docstring, each quote and backslash is escaped
# and every character Python does not print as itself is an escape sequence, so no input can close the
# literal, start a line, or hold a byte the file cannot; the code around it is the generator's alone.
def _escaped(text: str) -> str:
    """``text`` for inside ``"..."`` or ``\"\"\"...\"\"\"``: it reads back as ``text`` and cannot end early."""
    return "".join(_ESCAPES.get(ch) or (ch if ch.isprintable() else repr(ch)[1:-1]) for ch in text)


_ESCAPES = {"\\": "\\\\", '"': '\\"'}


def _lit(value: Any) -> str:
    """A Python literal for a JSON value: strings in double quotes, JSON's true/false/null as Python's."""
    if isinstance(value, str):
        return f'"{_escaped(value)}"'
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_lit(str(k))}: {_lit(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_lit(v) for v in value) + "]"
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({_lit(repr(value))})"  # JSON's NaN and Infinity, which have no literal
    if value is None or isinstance(value, bool | int | float):
        return repr(value)
    raise TestgenError(f"a recorded value of type {type(value).__name__} cannot be written into a test")


def _message(static: str, dynamic: str = "") -> str:
    """An assertion message: ``static`` as a plain literal, then ``dynamic`` (the generator's own f-string
    fields, never recorded text) as an f-string beside it."""
    return _lit(static) + (f' f"{dynamic}"' if dynamic else "")


def _doc(text: str) -> str:
    return _escaped(text.strip())


def label(mode_id: str) -> str:
    found = BY_ID.get(mode_id)
    return found.label if found else mode_id


# --- what to assert -----------------------------------------------------------------------------------
def verdict_of(case: casefile.Case, org_key: Ed25519PublicKey | None = None, expected: Any = None) -> Verdict:
    """The run's verdict: the detectors run now (offline; held to ``expected`` when given, else to the run's
    own), plus what judges' verdicts the collector signed add."""
    return evidence.verdict_of(case, org_key, expected=expected)


def expected_of(case: casefile.Case, expected: Any = None) -> Any | None:
    """What the run should produce: ``expected`` when given (set after the run, or on the command line),
    else the value the run recorded on its run span; None when neither."""
    if expected is not None:
        return expected
    recorded = run_view(case.spans).expected
    return parse_expected(recorded) if recorded.strip() else None


def checks(case: casefile.Case, verdict: Verdict | None = None, expected: Any = None) -> list[Check]:
    """Every test function for the case: semantic (the verdict's failures, or the good run pinned; the
    expected outcome, when there is one), then structural."""
    expected = expected_of(case, expected)
    verdict = verdict or verdict_of(case, expected=expected)
    steps = case.recording.steps
    semantic = _semantic(verdict.modes, steps) if verdict.modes else _pinned(case, steps)
    if expected is not None:
        semantic.append(_expected_check(expected))
    role = [h.explanation for h in verdict.modes if h.mode == ROLE_SPEC]
    return [*semantic, *_structural(case, steps, role)]


def _expected_check(expected: Any) -> Check:
    """The regression run's outcome must meet what the run should produce, compared as the analysis
    compares (the expected value written out as a literal)."""
    shown = expected if isinstance(expected, str) else repr(expected)
    return Check(
        name="test_the_outcome_is_the_one_expected", mode=TASK_SPEC,
        doc=f"{label(TASK_SPEC)}. The run should produce: {shown}",
        body=(f"missed = regression.misses({_lit(expected)})",
              f"assert missed is None, {_message(label(TASK_SPEC) + ': ', '{missed} ')} + regression.describe()"),
    )


def _semantic(hits: Iterable[ModeHit], steps: list[RecordedStep]) -> list[Check]:
    found: list[Check] = []
    argument_checks: set[tuple[str, str]] = set()
    modes_checked: set[str] = set()
    for hit in hits:
        if hit.detector == EXPECTED_DETECTOR:  # the expected outcome has a test of its own (_expected_check)
            continue
        check = _argument_check(hit, steps) if hit.mode == TASK_SPEC else None
        if check is not None:
            key = (check.name, check.mode)
            if key not in argument_checks:
                argument_checks.add(key)
                found.append(check)
            continue
        if hit.mode in modes_checked or hit.mode == ROLE_SPEC:  # the manifest's checks below assert FM-1.2
            continue
        modes_checked.add(hit.mode)
        known = BY_ID.get(hit.mode)  # a verdict read from a case may name a mode this version does not know
        name = f"test_no_{_identifier(hit.mode)}_{_identifier(known.name if known else 'mode')}"
        found.append(Check(
            name=name, mode=hit.mode, doc=f"{label(hit.mode)}. The recorded run: {hit.explanation}",
            body=(f"assert {_lit(hit.mode)} not in regression.modes(), "
                  f"{_message(label(hit.mode) + ' again: ', '{regression.verdict.root_cause}')}",),
        ))
    return found


def _argument_check(hit: ModeHit, steps: list[RecordedStep]) -> Check | None:
    """FM-1.1 on a tool argument: each call of that tool must keep to what the request states."""
    argument = next((e for e in hit.evidence if e.path.startswith(_ARGUMENTS)), None)
    stated = next((e for e in hit.evidence if not e.path.startswith(_ARGUMENTS)), None)
    if argument is None or argument.step is None or argument.step >= len(steps):
        return None
    step = steps[argument.step]
    if step.kind != KIND_TOOL:
        return None
    tool, path = step.name, argument.path.removeprefix(_ARGUMENTS)
    quote = stated.value if stated is not None else ""
    var = _identifier(path.rsplit(".", 1)[-1])
    var = f"{var}_value" if var in _TAKEN else var
    plural = f"{var}s" if not var.endswith("s") else f"{var}_values"
    if keyword.iskeyword(plural) or plural in _TAKEN:  # an argument "a" or "clas": "as", "class"
        plural = f"{var}_values"
    head = f"{label(TASK_SPEC)}: the request says {quote!r}; {tool} got {path}="
    exact = _exact_value(quote)
    body = [f"{plural} = regression.arguments({_lit(tool)}, {_lit(path)})",
            f"assert {plural}, {_message(f'{label(TASK_SPEC)}: {tool} never went through: the request was not carried out. ', '{regression.describe()}')}",
            f"for {var} in {plural}:"]
    if exact is not None:
        body.append(f"    assert str({var}).casefold() == {_lit(exact)}, {_message(head, '{' + var + '!r}')}")
    else:
        body += [f"    problem = regression.breaks_request({_lit(path)}, {var})",
                 f"    assert problem is None, {_message(f'{label(TASK_SPEC)}: {tool}: ', '{problem}')}"]
    recorded = f"{tool} (step {step.step}) got {path}={argument.value}"
    return Check(name=f"test_{_identifier(tool)}_{_identifier(path)}_keeps_to_the_request", mode=TASK_SPEC,
                 doc=f"{label(TASK_SPEC)}. The request says {quote!r}; the recorded run's {recorded}.",
                 body=tuple(body))


def _exact_value(quote: str) -> str | None:
    """The one value the request states, normalised, when it is a plain day or place ("friday", "lisbon")."""
    stated = [m for m in mentions(quote) if not m.negated]
    if len(stated) == 1 and stated[0].kind in (Kind.DAY, Kind.PLACE):
        return str(stated[0].value).casefold()
    return None


def _acts(case: casefile.Case, step: RecordedStep) -> bool:
    manifest = case.manifest_obj
    rule = manifest.tools.get(step.name) if manifest is not None else None
    span = next((s for s in case.spans if s.span_id == step.span_id), None)
    flagged = span is not None and span.attributes.get(semconv.TOOL_SIDE_EFFECT, "").lower() == "true"
    return flagged or bool(rule and rule.side_effect)


def _pinned(case: casefile.Case, steps: list[RecordedStep]) -> list[Check]:
    """A run with no failure: its side-effect calls, with their arguments, are what the agent must still do."""
    found = [Check(name="test_the_analysis_finds_no_failure", mode="",
                   doc="The recorded run had no failure; the analysis of the regression run finds none either.",
                   body=("assert not regression.modes(), "
                         f"{_message('the analysis finds: ', '{regression.verdict.root_cause}')}",))]
    acting = sorted({s.name for s in steps if s.kind == KIND_TOOL and not s.failed and _acts(case, s)})
    for tool in acting:
        calls = [dict(s.request) for s in steps if s.kind == KIND_TOOL and s.name == tool and not s.failed]
        found.append(Check(
            name=f"test_{_identifier(tool)}_as_recorded", mode=TASK_SPEC,
            doc=f"The good run called {tool} (it acts on the world) with these arguments; the agent must still.",
            body=(f"assert [dict(c.arguments) for c in regression.tool_calls({_lit(tool)}) if not c.failed] == "
                  f"{_lit(calls)}, {_message(f'{label(TASK_SPEC)}: {tool} acted otherwise than the good run. ', '{regression.describe()}')}",),
        ))
    return found


def _structural(case: casefile.Case, steps: list[RecordedStep], role_failures: list[str]) -> list[Check]:
    """The manifest's limits, and the run's bounds; ``role_failures``: the FM-1.2 the analysis found."""
    found = []
    manifest = case.manifest_obj
    role = label(ROLE_SPEC)
    if manifest is not None and not manifest.allow_unlisted_tools:
        allowed = "{" + ", ".join(_lit(t) for t in sorted(manifest.tools)) + "}"
        found.append(Check(name="test_only_tools_the_manifest_lists", mode=ROLE_SPEC,
                           doc="No tool outside the signed manifest.",
                           body=(f"unlisted = regression.tool_names() - {allowed}",
                                 f"assert not unlisted, {_message(f'{role}: tools the manifest does not list: ', '{unlisted}')}")))
    if manifest is not None:
        limited = sorted((t, r.max_per_run) for t, r in manifest.tools.items() if r.max_per_run is not None)
        if limited:
            found.append(Check(name="test_tool_counts_within_the_manifest", mode=ROLE_SPEC,
                               doc="Each tool asked for at most as often as the manifest allows in one run.",
                               body=tuple(f"assert regression.count({_lit(t)}) <= {_lit(n)}, "
                                          f"{_message(f'{role}: {t} asked for more than {n} time(s). ')} + regression.describe()"
                                          for t, n in limited)))
    found.append(Check(name="test_no_scope_violation", mode=ROLE_SPEC,
                       doc="No call refused as the run went, and none the manifest in force refuses when judged again."
                           + "".join(f" The recorded run: {why}" for why in role_failures),
                       body=(f"assert not regression.violations, {_message(f'{role}: ', '{regression.violations}')}",)))
    found.append(Check(name="test_not_halted", mode=ROLE_SPEC, doc="Nothing halted the run.",
                       body=(f"assert not regression.halts, {_message(f'{role}: halted at ', '{regression.halts}')}",)))
    bound = max(STEP_BOUND_FACTOR * len(steps), STEP_BOUND_MIN)
    found.append(Check(name="test_within_the_step_bound", mode=TERMINATION,
                       doc=f"At most {bound} steps (the recorded run took {len(steps)}).",
                       body=(f"assert len(regression.steps) <= {bound}, "
                             f"{_message(f'{label(TERMINATION)}: ', '{len(regression.steps)} steps')}",)))
    found.append(Check(name="test_no_uncaught_exception", mode=PREMATURE, doc="The agent ends without an exception.",
                       body=(f"assert regression.exception is None, "
                             f"{_message(f'{label(PREMATURE)}: the agent ended in ', '{regression.exception}')}",)))
    return found


# --- the file -------------------------------------------------------------------------------------------
def render(case: casefile.Case, case_file: str, verdict: Verdict | None = None, expected: Any = None) -> str:
    """The test module's text (``expected``: what the run should produce, when not the run's own)."""
    expected = expected_of(case, expected)
    verdict = verdict or verdict_of(case, expected=expected)
    what = verdict.root_cause or "no failure: the test pins the run's good behaviour."
    unsigned = [casefile.UNSIGNED_NOTICE, ""] if not case.signed else []
    checked = ("The case beside this file is checked against the org public key (--agentreplay-org-key) first."
               if case.signed else "The case beside this file is unsigned: only its chain's links are checked.")
    doc = [
        *unsigned, f"Regression test for run {case.run_id} of {agent_name(case)}, written by `agentreplay testgen`.",
        "",
        *f"The analysis ({verdict.judge}): {what}".splitlines(),  # each line escaped below, whatever it holds
        "",
        "The current agent runs on the recorded input: recorded answers until its first divergence,",
        "then the model endpoint given for tests (--agentreplay-model-url); tools always sandboxed.",
        checked,
    ]
    lines = [
        '"""' + "\n".join(_doc(line) for line in doc),
        '"""',
        "",
        "from pathlib import Path",
        "",
        "import pytest",
        *([] if case.signed else ["", "from agentreplay_incident.case import read_unsigned"]),
        "",
        f"CASE = Path(__file__).with_name({_lit(case_file)})",
        "",
        "",
        '@pytest.fixture(scope="module")',
        "def regression(agentreplay):",
        "    return agentreplay.regress(CASE)" if case.signed else "    return agentreplay.regress(read_unsigned(CASE))",
    ]
    named: set[str] = set()
    for check in checks(case, verdict, expected):
        name = _unique(check.name, named)
        lines += ["", ""]
        if check.mode:
            lines.append(f"@pytest.mark.mast({_lit(check.mode)})")
        lines += [f"def {name}(regression):", f'    """{_doc(check.doc)}"""']
        lines += [f"    {line}" for line in check.body]
    return "\n".join(lines) + "\n"


def _unique(name: str, taken: set[str]) -> str:
    """``name``, or ``name_2``, ``name_3``...: two tools whose names read alike keep a test each."""
    found, n = name, 1
    while found in taken:
        n += 1
        found = f"{name}_{n}"
    taken.add(found)
    return found


def generate(case: casefile.Case, out_dir: Path, org_key: Ed25519PublicKey | None, *,
             expected: Any = None) -> Generated:
    """Check the case (:func:`~agentreplay_incident.case.check_as_recorded`: a signed run against the org
    key, an unsigned one for its links), then write the test and the case into ``out_dir``. A run id
    that is not one (:func:`~agentreplay_otel.core.is_trace_id`) is refused first: it names the files.
    ``expected``: what the run should produce (set after it), when not the one it recorded."""
    if not is_trace_id(case.run_id):
        raise TestgenError(f"the case's run id is not a run id ({TRACE_ID_FORM}): no test is written for it")
    try:
        found = casefile.check_as_recorded(case, org_key)
    except casefile.CaseError as exc:
        raise TestgenError(str(exc)) from exc
    if not found.ok:
        raise TestgenError(f"the case of run {case.run_id} does not verify: {'; '.join(found.problems)}")
    if not case.recording.steps:
        raise TestgenError(f"run {case.run_id} recorded no LLM or tool call: there is nothing to replay")
    test_name, case_name = file_names(case)
    out_dir.mkdir(parents=True, exist_ok=True)
    expected = expected_of(case, expected)
    verdict = verdict_of(case, org_key, expected)
    casefile.write(case, out_dir / case_name)
    (out_dir / test_name).write_text(render(case, case_name, verdict, expected), encoding="utf-8")
    return Generated(test=out_dir / test_name, case=out_dir / case_name,
                     checks=tuple(checks(case, verdict, expected)))
