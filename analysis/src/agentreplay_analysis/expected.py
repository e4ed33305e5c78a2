"""Expected outcomes: what a run (or its task) should produce, and whether it did.

A run carries what it should produce as ``agentreplay.run.expected`` on its run span
(``agentreplay_otel.run(expected=...)``): text as given (``"refund of 12.50 to A-1042"``), anything else
as JSON (``{"order": "A-1042", "amount": 12.5}``). It can also be given to the analysis afterwards
(``agentreplay expect RUN VALUE``, kept beside the run; ``--expected FILE``, a dataset of task id ->
expected). :func:`check` holds the run's outcome to it:

* the outcome is what the run did and said: the arguments of its acting tool calls that succeeded (a
  booking, a refund), its final answer's words and its recorded output;
* a dict is compared field by field: an acting call's argument of the same key must hold the expected
  value (numbers by value: ``12.50`` is ``12.5``; text without regard to case; identifiers normalised);
  a field no argument names must appear in the final answer or the output;
* text (or a number, or a list of them) is read for the values it states: numbers, identifiers
  (``A-1042``, ``TP123``), days; each must appear among the outcome's values or words. Text stating no
  such value must appear in the final answer or the output as written (case and spacing aside).

A mismatch is MAST FM-1.1 (disobey task specification: the outcome is not the one the task asked
for), detector ``expected``, citing the expected value and what the run did instead; its culprit is
the LLM call that asked for the contradicting action, else the one that gave the final answer.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentreplay_analysis.constraints import DAYS, reference, references
from agentreplay_analysis.transcript import RunView, Step, leaves
from agentreplay_analysis.verdict import Culprit, Evidence, Fix, ModeHit
from agentreplay_otel.core import semconv

DETECTOR = "expected"
MODE = "FM-1.1"
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:[.,]\d+)?(?![\w])")
_DAY = re.compile(r"\b(" + "|".join(DAYS) + r")\b", re.IGNORECASE)


def encode(value: Any) -> str:
    """How an expected value is kept: text as given, anything else as compact JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def parse(text: str) -> Any:
    """A kept (or typed) expected value: JSON when it is JSON (an object, a list, a number), else the text."""
    stripped = text.strip()
    if stripped[:1] in ("{", "[") or _NUMBER.fullmatch(stripped):
        try:
            return json.loads(stripped)
        except ValueError:
            pass
    return text


# --- datasets: task id -> expected ----------------------------------------------------------------
def task_key(view: RunView) -> str:
    """The task a run was asked: ``agent/sha256-prefix`` of its first request, case and spacing aside
    (the key ``agentreplay models --report`` counts trials by)."""
    text = view.request.text if view.request is not None else view.run_input
    normal = re.sub(r"\s+", " ", text).strip().casefold()
    return f"{view.agent_id or 'unknown'}/{hashlib.sha256(normal.encode()).hexdigest()[:16]}"


def load_dataset(path: Path) -> dict[str, Any]:
    """A dataset file of task id -> expected: one JSON object (``{"TASK": EXPECTED, ...}``), a JSON list
    or JSONL lines of ``{"task": ID, "expected": VALUE}`` (``id``, ``task_id`` or ``run`` name the task
    too). ValueError says what is wrong with it."""
    text = path.read_text()
    try:
        doc: Any = json.loads(text)
    except ValueError:
        try:
            doc = [json.loads(line) for line in text.splitlines() if line.strip()]
        except ValueError as exc:
            raise ValueError(f"{path}: neither JSON nor JSON lines: {exc}") from exc
    if isinstance(doc, Mapping):
        return {str(k): v for k, v in doc.items()}
    if not isinstance(doc, list):
        raise ValueError(f"{path}: a JSON object of task id -> expected, or lines of {{\"task\": ..., \"expected\": ...}}")
    found: dict[str, Any] = {}
    for i, row in enumerate(doc):
        key = next((row[k] for k in ("task", "task_id", "id", "run") if isinstance(row, Mapping) and k in row), None)
        if key is None or "expected" not in row:
            raise ValueError(f"{path}: entry {i + 1} has no task id (task, task_id, id or run) or no expected")
        found[str(key)] = row["expected"]
    return found


def for_run(dataset: Mapping[str, Any], view: RunView) -> Any | None:
    """A run's expected value in a dataset: by its run id (or a unique prefix of it), its task key
    (:func:`task_key`), its agent's task key prefix-free request text, or its request as written."""
    if view.run_id in dataset:
        return dataset[view.run_id]
    prefixed = [k for k in dataset if len(k) >= 6 and view.run_id.startswith(k.lower())]
    if len(prefixed) == 1:
        return dataset[prefixed[0]]
    key = task_key(view)
    if key in dataset:
        return dataset[key]
    text = view.request.text if view.request is not None else view.run_input
    normal = re.sub(r"\s+", " ", text).strip().casefold()
    for k, v in dataset.items():
        if normal and re.sub(r"\s+", " ", k).strip().casefold() == normal:
            return v
    return None


# --- holding a run to it --------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Fact:
    """One thing the run did or said: an acting call's argument, or its final words."""

    step: int | None
    span_id: str
    path: str
    value: Any
    key: str = ""  # an argument's last key, case-folded ("" for words)


def outcome(view: RunView) -> list[Fact]:
    """What the run did and said: its successful acting calls' arguments, its final answer, its output."""
    facts: list[Fact] = []
    for tool in view.tool_steps:
        if tool.acts and not tool.failed:
            for path, value in leaves(dict(tool.arguments)):
                key = path.rsplit(".", 1)[-1].split("[", 1)[0].casefold()
                facts.append(Fact(step=tool.step, span_id=tool.span_id, key=key, value=value,
                                  path=f"{semconv.GEN_AI_TOOL_CALL_ARGUMENTS}.{path}"))
    final = view.final_answer
    if final is not None:
        facts.append(Fact(step=final.step, span_id=final.span_id, path=semconv.GEN_AI_OUTPUT_MESSAGES,
                          value=final.text))
    if view.run_output.strip():
        facts.append(Fact(step=None, span_id=view.root_span_id, path=semconv.RUN_OUTPUT, value=view.run_output))
    return facts


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        return float(value.strip().replace(",", "."))
    return None


def _normal(value: Any) -> str:
    text = re.sub(r"\s+", " ", str(value)).strip().casefold()
    return text.lstrip("#")


def same(expected: Any, actual: Any) -> bool:
    """Two values alike by meaning: numbers by value, text case and spacing aside."""
    a, b = _number(expected), _number(actual)
    if a is not None or b is not None:
        return a is not None and b is not None and abs(a - b) < 1e-9
    return _normal(expected) == _normal(actual)


def _in_words(needle: Any, text: str) -> bool:
    """Whether ``needle`` (a number, or text) appears in ``text``: a number as any number of that value."""
    want = _number(needle)
    if want is not None:
        return any(abs(float(m.group(0).replace(",", ".")) - want) < 1e-9 for m in _NUMBER.finditer(text))
    normal = _normal(needle)
    return bool(normal) and re.search(r"(?<!\w)" + re.escape(normal) + r"(?!\w)", _normal(text)) is not None


def _found(needle: Any, facts: Iterable[Fact]) -> bool:
    return any(same(needle, f.value) if f.key else _in_words(needle, str(f.value)) for f in facts)


def needles(text: str) -> list[Any]:
    """The values a text of an expected outcome states: numbers, identifiers, days (in its order)."""
    found: list[tuple[int, Any]] = []
    taken: list[tuple[int, int]] = []
    for ref in references(text):
        at = text.find(ref.quote)
        taken.append((at, at + len(ref.quote)))
        found.append((at, ref.quote))
    for m in _NUMBER.finditer(text):
        if not any(a <= m.start() < b for a, b in taken):
            found.append((m.start(), float(m.group(0).replace(",", "."))))
    for m in _DAY.finditer(text):
        found.append((m.start(), m.group(1)))
    return [value for _, value in sorted(found, key=lambda pair: pair[0])]


@dataclass(frozen=True, kw_only=True)
class Miss:
    """One expected value the run's outcome does not hold: what was expected, and what it did instead."""

    what: str  # "amount = 12.5", "'A-1042'"
    instead: Fact | None = None


def misses(expected: Any, facts: list[Fact]) -> list[Miss]:
    """What of ``expected`` the outcome ``facts`` do not hold ([]: it meets it)."""
    if isinstance(expected, Mapping):
        found: list[Miss] = []
        for path, want in leaves(dict(expected)):
            key = path.rsplit(".", 1)[-1].split("[", 1)[0].casefold()
            named = [f for f in facts if f.key == key]
            if named and any(same(want, f.value) for f in named):
                continue
            if not named and _found(want, facts):
                continue
            found.append(Miss(what=f"{path} = {want!r}", instead=named[-1] if named else None))
        return found
    if isinstance(expected, list):
        return [m for item in expected for m in misses(item, facts)]
    if expected is None or isinstance(expected, bool | int | float):
        return [] if expected is None or _found(expected, facts) else [Miss(what=repr(expected))]
    text = str(expected)
    stated = needles(text)
    if stated:
        return [Miss(what=repr(n if not isinstance(n, float) or not n.is_integer() else int(n)),
                     instead=_of_kind(n, facts)) for n in stated if not _found(n, facts)]
    words = [f for f in facts if not f.key]
    return [] if any(_in_words(text, str(f.value)) for f in words) else [Miss(what=repr(text.strip()))]


def _of_kind(needle: Any, facts: list[Fact]) -> Fact | None:
    """The acting call's argument holding another value of the needle's kind (a day for a day, a number
    for a number, an identifier for an identifier): what the run did instead."""
    def kind(value: Any) -> str:
        if _number(value) is not None:
            return "number"
        if isinstance(value, str) and value.strip().casefold() in DAYS:
            return "day"
        if isinstance(value, str) and reference(value) is not None:
            return "reference"
        return ""

    want = kind(needle)
    found = [f for f in facts if f.key and want and kind(f.value) == want]
    return found[-1] if found else None


def check(view: RunView, expected: Any = None) -> ModeHit | None:
    """The run held to its expected outcome (``expected``, else the one it carries): FM-1.1 citing the value
    when it does not meet it; None when it does, or when nothing is expected or the run is not over."""
    if expected is None:
        if not view.expected.strip():
            return None
        expected = parse(view.expected)
    if not view.finished:
        return None
    facts = outcome(view)
    missing = misses(expected, facts)
    if not missing:
        return None
    said = encode(expected)
    evidence = [Evidence(step=None, span_id=view.root_span_id, path=semconv.RUN_EXPECTED, value=said,
                         note="the run should produce")]
    for miss in missing:
        if miss.instead is not None:
            evidence.append(Evidence(step=miss.instead.step, span_id=miss.instead.span_id, path=miss.instead.path,
                                     value=str(miss.instead.value), note=f"expected {miss.what}; the run has"))
    culprit = _culprit(view, missing)
    did = "; ".join(f"{m.what} (the run has {m.instead.value!r} at step {m.instead.step})" if m.instead is not None
                    else f"{m.what} (not in what the run did or said)" for m in missing)
    explanation = f"The run should produce {said}, but its outcome does not hold {did}."
    fix = None
    if culprit is not None and culprit.step is not None:
        base = view.system_prompt
        fix = Fix(at=culprit.step, system=f"{base} The outcome must be: {said}.".strip())
    return ModeHit(mode=MODE, detector=DETECTOR, explanation=explanation, culprit=culprit,
                   evidence=tuple(evidence), fix=fix)


def _culprit(view: RunView, missing: list[Miss]) -> Culprit | None:
    """The LLM call that asked for the first contradicting action, else the one that answered last."""
    for miss in missing:
        if miss.instead is not None and miss.instead.path != semconv.GEN_AI_OUTPUT_MESSAGES:
            tool = next((s for s in view.tool_steps if s.step == miss.instead.step), None)
            issuer = view.issuer(tool) if tool is not None else None
            if issuer is not None:
                return _as_culprit(issuer)
    last: Step | None = view.final_answer or (view.llm_steps[-1] if view.llm_steps else None)
    return _as_culprit(last) if last is not None else None


def _as_culprit(step: Step) -> Culprit:
    return Culprit(step=step.step, span_id=step.span_id, name=step.span_name)
