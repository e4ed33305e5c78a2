"""Generated tests are safe by construction: no recorded text becomes code (issue 25, item 1).

A case's every text field (tool names, argument names and values, the model, the agent, messages,
error messages, the verdict's explanations and evidence) is written into the generated test only as
an escaped literal or docstring. Hypothesis puts arbitrary strings there (quotes, backslashes, newlines,
triple quotes, braces, NUL, lone surrogates, very long ones) and the module must compile, hold the
texts exactly, and have the generator's shape and nothing else; a few hostile cases are then
collected by pytest in a subprocess, which must run none of their payloads.

The case is built in memory from spans, as a store or a case file gives them, and goes through the
same functions ``agentreplay testgen`` writes with (:func:`agentreplay_incident.testgen.render`).
"""

from __future__ import annotations

import ast
import json
import math
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agentreplay_analysis.verdict import Evidence, ModeHit, Outcome, Verdict
from agentreplay_client.models import ChainState, ChainStatus, RunSummary
from agentreplay_incident import case as casefile
from agentreplay_incident import testgen
from agentreplay_otel.core import SpanRecord, semconv

RUN = "5e" * 16
MARK = "PWNED-BY-THE-CASE"  # what every payload tries to create, in the folder pytest runs in
PAYLOADS = (
    f'"""\nimport pathlib; pathlib.Path("{MARK}").touch()\n"""',
    f'"); __import__("pathlib").Path("{MARK}").touch(); ("',
    f"{{__import__('pathlib').Path('{MARK}').touch()}}",  # an f-string field, were it one
    f"\\\nimport pathlib; pathlib.Path('{MARK}').touch()  #",
    'ends in a quote"',
    "ends in a backslash\\",
)
_HOSTILE = st.sampled_from(['"""', '"', "'''", "\\", "\n", "\r", "\x00", "\x0c", "\ud800", "\udfff", "\u2028",
                            "\x85", "\ufeff", "{", "}", "{{", "#", *PAYLOADS])
TEXT = st.lists(st.one_of(st.characters(), _HOSTILE, st.text()), max_size=12).map("".join)


# --- a case in memory ------------------------------------------------------------------------------------
def span(n: int, name: str, attributes: dict[str, str], *, root: bool = False, message: str = "",
         agent: str = "agent") -> SpanRecord:
    return SpanRecord(trace_id=RUN, span_id=f"{n + 1:016x}", parent_span_id="" if root else f"{1:016x}",
                      name=name, kind="Internal", start_ns=n, end_ns=n + 1, status_code="Error" if message else "Unset",
                      status_message=message, attributes=attributes, resource={semconv.AGENT_ID: agent})


def make_case(t: dict[str, str], *, signed: bool) -> casefile.Case:
    """A run of one LLM call and one side-effect tool call, every text of it taken from ``t``."""
    arguments = {t["argument"]: t["value"], "count": 3, "ratio": math.nan, "nested": [t["value"], {t["key"]: None}]}
    root = {semconv.GEN_AI_AGENT_NAME: t["agent"], semconv.RUN_ENTRYPOINT: json.dumps([t["value"]])}
    if signed:
        root[semconv.CHAIN_SEAL] = "seal"  # render reads that the run is signed; the seal is check's business
    spans = (
        span(1, t["model"], {semconv.STEP: "0", semconv.GEN_AI_OPERATION_NAME: semconv.OP_CHAT,
                             semconv.GEN_AI_REQUEST_MODEL: t["model"], semconv.GEN_AI_PROVIDER_NAME: t["value"],
                             semconv.REQUEST: json.dumps({"messages": [{"role": "user", "content": t["message"]}]}),
                             semconv.RESPONSE: t["message"]}, agent=t["agent"]),
        span(2, t["tool"], {semconv.STEP: "1", semconv.GEN_AI_OPERATION_NAME: semconv.OP_EXECUTE_TOOL,
                            semconv.GEN_AI_TOOL_NAME: t["tool"], semconv.GEN_AI_TOOL_CALL_ARGUMENTS: json.dumps(arguments),
                            semconv.GEN_AI_TOOL_CALL_RESULT: t["value"], semconv.TOOL_SIDE_EFFECT: "true"},
             agent=t["agent"]),
        span(0, t["agent"], root, root=True, message=t["error"], agent=t["agent"]),
    )
    manifest = {"version": 1, "unlisted_tools": "deny",
                "tools": {whole(t["tool"]): {"side_effect": True, "max_per_run": 1}, whole(t["key"]): {"max_per_run": 2}}}
    summary = RunSummary(run_id=RUN, agent_id=t["agent"], agent_name=t["agent"], service_name=t["value"],
                         run_kind="record", name=t["agent"], start_ns=0, end_ns=3, span_count=3,
                         status_code="Error", cost_usd=0.0,
                         chain=ChainStatus(run_id=RUN, status=ChainState.INTACT, seal="valid", span_count=3))
    return casefile.Case(run_id=RUN, exported_ns=0, summary=summary, spans=spans, certificates={},
                         manifest=json.dumps({"manifest": manifest}), decisions=(), classifications=())


def whole(text: str) -> str:
    """``text`` without lone surrogates: a manifest holding one has no canonical form (RFC 8785), so no
    signature can cover it and checking a case refuses it before any test is written."""
    return "".join(c for c in text if not "\ud800" <= c <= "\udfff")


def failed(t: dict[str, str], *, unknown_mode: bool = True) -> Verdict:
    """A verdict naming every kind of failure testgen writes a check for, every text of it from ``t``
    (``unknown_mode``: and a mode this version does not know, named by ``t["mode"]``)."""
    argument = Evidence(step=1, span_id=f"{3:016x}", path=f"{semconv.GEN_AI_TOOL_CALL_ARGUMENTS}.{t['argument']}",
                        value=t["value"], note=t["message"])
    stated = Evidence(step=0, span_id=f"{2:016x}", path="request", value=t["message"])
    modes = (
        ModeHit(mode=testgen.TASK_SPEC, detector=t["key"], explanation=t["explanation"], evidence=(argument, stated)),
        ModeHit(mode=testgen.ROLE_SPEC, detector=t["key"], explanation=t["explanation"]),
        ModeHit(mode=testgen.PREMATURE, detector=t["key"], explanation=t["explanation"]),
    )
    if unknown_mode:
        modes += (ModeHit(mode=t["mode"], detector=t["key"], explanation=t["explanation"]),)
    return Verdict(run_id=RUN, outcome=Outcome.FAILED, classifier="llm", model=t["model"], modes=modes,
                   root_cause=t["explanation"])


def good(t: dict[str, str]) -> Verdict:
    return Verdict(run_id=RUN, outcome=Outcome.OK, classifier="detectors", root_cause=t["explanation"])


FIELDS = ("tool", "argument", "value", "key", "model", "agent", "message", "error", "explanation", "mode")


def texts(value: str) -> dict[str, str]:
    return dict.fromkeys(FIELDS, value)


# --- what a safe module is --------------------------------------------------------------------------------
HEADER = ["from pathlib import Path", "import pytest"]
UNSIGNED_HEADER = [*HEADER, "from agentreplay_incident.case import read_unsigned"]
CALLABLE = {"Path", "str", "len", "dict", "float", "read_unsigned"}
STATEMENTS = (ast.Assign, ast.Assert, ast.For, ast.Return)


def assert_safe(source: str, case: casefile.Case, verdict: Verdict) -> None:
    """The module compiles, is the generator's shape and nothing else, and holds every text exactly."""
    source.encode("utf-8")  # it can be written to a file
    tree = ast.parse(source)
    compile(tree, "test_generated.py", "exec")
    first, *rest = tree.body
    assert isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
    imports = [ast.unparse(n) for n in rest if isinstance(n, ast.Import | ast.ImportFrom)]
    assert imports == (HEADER if case.signed else UNSIGNED_HEADER)
    assert all(isinstance(n, ast.Import | ast.ImportFrom | ast.Assign | ast.FunctionDef) for n in rest)
    functions = [n for n in rest if isinstance(n, ast.FunctionDef)]
    for fn in functions:  # a docstring, then assignments, assertions, loops of those, a return
        body = fn.body[1:] if ast.get_docstring(fn, clean=False) is not None else fn.body
        for node in body:
            assert isinstance(node, STATEMENTS), ast.unparse(node)
            if isinstance(node, ast.For):
                assert all(isinstance(s, ast.Assign | ast.Assert) for s in node.body) and not node.orelse
    docstrings = 1 + sum(ast.get_docstring(fn, clean=False) is not None for fn in functions)
    assert sum(isinstance(n, ast.Expr) for n in ast.walk(tree)) == docstrings  # no bare expression runs
    for node in ast.walk(tree):
        assert not isinstance(node, ast.Lambda | ast.Import | ast.ImportFrom) or node in rest
        if isinstance(node, ast.Name):
            assert not node.id.startswith("__") or node.id == "__file__", node.id
        if isinstance(node, ast.Attribute):
            assert not node.attr.startswith("__"), node.attr
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id in CALLABLE, node.func.id
    # every docstring reads back as the text it was made from
    docs = [ast.get_docstring(fn, clean=False) for fn in functions]
    assert [c.doc.strip() for c in testgen.checks(case, verdict)] == docs[1:]
    module_doc = ast.get_docstring(tree, clean=False) or ""
    assert all(line.strip() in module_doc for line in verdict.root_cause.splitlines())
    # the recorded names are there as strings, not as code
    constants = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    manifest = case.manifest_obj
    assert manifest is not None and set(manifest.tools) <= constants


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(t=st.fixed_dictionaries({f: TEXT for f in FIELDS}), signed=st.booleans())
@example(t=texts('ends in a quote"'), signed=True)
@example(t=texts('"""'), signed=False)
@example(t=texts("x" * 100_000 + '"'), signed=True)
@example(t=texts("\ud800\x00\\"), signed=True)
@example(t={**texts(""), "argument": "A"}, signed=False)  # its values' variable, "as": a keyword
@example(t={**texts(""), "argument": "clas"}, signed=False)  # "class"
def test_no_recorded_text_becomes_code(t: dict[str, str], signed: bool):
    case = make_case(t, signed=signed)
    for verdict in (failed(t), good(t)):
        assert_safe(testgen.render(case, "x.case.json", verdict), case, verdict)


def test_text_ending_in_a_quote_or_holding_triple_quotes_compiles():
    """The symptom in the issue: a text ending in ``"`` closed the docstring it was written into."""
    for text in ('the booking failed: "TP125"', 'he said """stop"""', "a backslash at the end\\"):
        case = make_case(texts(text), signed=True)
        source = testgen.render(case, "x.case.json", failed(texts(text), unknown_mode=False))
        compile(source, "test_generated.py", "exec")
        assert text in ast.get_docstring(ast.parse(source), clean=False)


def test_pytest_collects_hostile_cases_tests_without_running_their_payloads(tmp_path: Path):
    """What CI does with generated tests: collect them (one pytest process for every payload). Nothing
    from a case runs."""
    expected = 0
    for n, payload in enumerate(PAYLOADS):
        t = texts(payload)
        for signed, verdict in ((True, failed(t)), (False, good(t))):
            case = make_case(t, signed=signed)
            stem = f"hostile_{n}_{'signed' if signed else 'unsigned'}"
            (tmp_path / f"test_{stem}.py").write_text(testgen.render(case, f"{stem}.case.json", verdict),
                                                      encoding="utf-8")
            casefile.write(case, tmp_path / f"{stem}.case.json")
            expected += len(testgen.checks(case, verdict))
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-o", "addopts=", "."], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{expected} tests collected" in done.stdout, done.stdout
    assert not list(tmp_path.rglob(MARK)) and not (Path.cwd() / MARK).exists()
