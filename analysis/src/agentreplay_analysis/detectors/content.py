"""FM-1.1 disobey task specification, by the meaning of values: an action's arguments against what the
user asked, compared as quantities with units (40 lb is 18.1 kg, not 40 kg), percentages and fractions
(3% is 3 under a ``*_percent`` key and 0.03 under a ``fraction``), times in a named zone (2am Berlin
time is 01:00Z in March, and New York keeps daylight time from its second Sunday), counted things
("6 replicas", "3 laptops", matched to the argument by its own name), exclusions ("everything except
the database": the record an earlier result calls the database, and its name), and identifiers inside
JSON bodies carried as strings. A later user turn that corrects an earlier one ("Actually, 3 laptops")
replaces what it restates. Each finding cites the user's words and the argument's path and value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from agentreplay_analysis import values as v
from agentreplay_analysis.detectors._base import Detector, argument, culprit, said, system_fix
from agentreplay_analysis.transcript import (
    Quote,
    RunView,
    Step,
    leaves,
)
from agentreplay_analysis.verdict import ModeHit
from agentreplay_otel.core import json_or

MODE = "FM-1.1"


def may_act(tool: Step) -> bool:
    """A tool held to the request: one that acts (:attr:`Step.acts`), or one not named as a read
    (``dispense``, ``restart_services``, ``scale_service``; not ``list_services`` nor ``order_status``)."""
    return tool.may_act


def current_turns(turns: tuple[Quote, ...]) -> list[tuple[Quote, bool]]:
    """Each user turn, and whether a later turn that corrects it (see :func:`values.corrects`) follows."""
    return [(t, any(v.corrects(later.text) for later in turns[i + 1:])) for i, t in enumerate(turns)]


def check(view: RunView) -> list[ModeHit]:
    turns = view.user_turns
    if not turns or not view.tool_steps:
        return []
    stated = _stated(turns)
    if not any(stated.values()):
        return []
    hits = []
    for tool in view.tool_steps:
        if not may_act(tool):
            continue
        args = v.expanded(tool.arguments)
        found = (_quantity(args, stated) or _percent(args, stated) or _zoned(args, stated)
                 or _count(args, stated) or _excluded(view, tool, args, stated))
        if found is None:
            continue
        path, value, quote, want = found
        issuer = view.issuer(tool)
        where = next((t for t in turns if quote in t.text), turns[0])
        hits.append(ModeHit(
            mode=MODE, detector="content",
            explanation=(f"The request says \"{quote}\", but {tool.name} (step {tool.step}) got {path}={value!r}"
                         f" ({want})" + (f": the model chose it at step {issuer.step}." if issuer else ".")),
            culprit=culprit(issuer or tool),
            evidence=(said(where, quote), argument(tool, path, value)),
            fix=system_fix(issuer, f"Keep to what the user asked for ({quote}): {want}.") if issuer else None,
        ))
    return hits


def _stated(turns: tuple[Quote, ...]) -> dict[str, list[Any]]:
    """What the user's turns state, each kind as the latest correcting turn left it."""
    kinds: dict[str, list[tuple[int, Any]]] = {"quantity": [], "percent": [], "zoned": [], "counted": [],
                                                "excluded": []}
    for i, turn in enumerate(turns):
        text = turn.text
        found: dict[str, list[Any]] = {
            "quantity": [q for q in v.quantities(text) if not q.bound] if v.may_state_quantities(text) else [],
            "percent": v.percents(text), "zoned": v.zoned_times(text), "counted": v.counted(text),
            "excluded": v.exclusions(text)}
        if i and v.corrects(text):
            for kind, items in found.items():
                if not items or kind == "excluded":
                    continue
                if kind == "quantity":
                    dims = {q.dimension for q in items}
                    kinds[kind] = [(j, q) for j, q in kinds[kind] if q.dimension not in dims]
                elif kind == "counted":
                    nouns = {c.noun for c in items}
                    kinds[kind] = [(j, c) for j, c in kinds[kind] if c.noun not in nouns]
                else:
                    kinds[kind] = []
        for kind, items in found.items():
            kinds[kind].extend((i, x) for x in items)
    return {k: [x for _, x in items] for k, items in kinds.items()}


Found = tuple[str, Any, str, str]


def _quantity(args: Mapping[str, Any], stated: dict[str, list[Any]]) -> Found | None:
    if not stated["quantity"]:
        return None
    for path, value, got in v.argument_quantities(args):
        same = [q for q in stated["quantity"] if q.dimension == got.dimension]
        if same and not any(v.same_quantity(got, q) for q in same):
            return path, value, same[0].quote, f"{got.quote} is not {' or '.join(q.quote for q in same)}"
    return None


def _percent(args: Mapping[str, Any], stated: dict[str, list[Any]]) -> Found | None:
    percents = stated["percent"]
    if not percents:
        return None
    for path, value, as_percent, how in v.argument_percents(args):
        if any(abs(as_percent - p) <= max(1e-6, abs(p) * 1e-3) for p, _ in percents):
            continue
        swapped = [q for p, q in percents if abs(as_percent - p / 100) <= abs(p) * 1e-3 / 100 + 1e-9
                   or abs(as_percent - p * 100) <= abs(p) * 0.1 + 1e-9]
        if swapped or len({p for p, _ in percents}) == 1:
            quote = swapped[0] if swapped else percents[0][1]
            want = (f"a {how} of {as_percent / 100 if how == 'fraction' else as_percent:g} is "
                    f"{as_percent:g}%, not {quote}")
            return path, value, quote, want
    return None


def _zoned(args: Mapping[str, Any], stated: dict[str, list[Any]]) -> Found | None:
    times = stated["zoned"]
    if not times:
        return None
    carried = v.argument_instants(args)
    if not carried:
        return None
    for _, _, when in carried:
        for t in times:
            local = when.astimezone(t.zone)
            if local.hour * 60 + local.minute == t.minutes:
                return None
    path, value, when = carried[0]
    t = times[0]
    local = when.astimezone(t.zone)
    return path, value, t.quote, f"that is {local:%H:%M} on {local:%Y-%m-%d} in {t.zone.key}"


def _count(args: Mapping[str, Any], stated: dict[str, list[Any]]) -> Found | None:
    for path, value, named in v.argument_counts(args, stated["counted"]):
        if all(c.value != value for c in named):
            return path, value, named[-1].quote, f"{value} is not {' or '.join(c.quote for c in named)}"
    return None


def _excluded(view: RunView, tool: Step, args: Mapping[str, Any], stated: dict[str, list[Any]]) -> Found | None:
    """An argument that is what the request leaves out: its words ("Acme Corp"), or a value of the one
    record an earlier result describes with them (the service whose role is "database", Priya's id)."""
    excluded = stated["excluded"]
    if not excluded:
        return None
    honoured = {str(x).lower() for p, x in leaves(args) if isinstance(x, str) and v.is_exclusion_key(p)}
    for words, quote in excluded:
        targets = _described(view, tool, words)
        for path, value in leaves(args):
            if not isinstance(value, str) or v.is_exclusion_key(path) or value.lower() in honoured:
                continue
            if value.lower() in targets or (len(value) <= 80 and v.holds_all(value, words)):
                return path, value, quote, f"the request leaves out {quote}"
    return None


def _described(view: RunView, tool: Step, words: frozenset[str]) -> set[str]:
    """Values of the records earlier results hold that a field describes with ``words``, and no sibling
    record shares."""
    out: set[str] = set()
    for step in view.tool_steps:
        if step.step >= tool.step or not step.result or step.result[:1] not in "{[":
            continue
        for records in _record_lists(json_or(step.result, None)):
            strings = [{str(x) for _, x in leaves(r) if isinstance(x, str)} for r in records]
            for i, own in enumerate(strings):
                if not any(v.holds_all(s, words) for s in own):
                    continue
                others = set().union(*(s for j, s in enumerate(strings) if j != i))
                out.update(s.lower() for s in own - others)
    return out


def _record_lists(doc: Any, depth: int = 0) -> list[list[Mapping[str, Any]]]:
    out: list[list[Mapping[str, Any]]] = []
    if depth > 3:
        return out
    if isinstance(doc, list):
        records = [r for r in doc if isinstance(r, Mapping)]
        if len(records) >= 2:
            out.append(records)
        for r in records:
            out.extend(_record_lists(r, depth + 1))
    elif isinstance(doc, Mapping):
        for x in doc.values():
            out.extend(_record_lists(x, depth + 1))
    return out


def nested_reference_step(tool: Step) -> Step | None:
    """The tool call with JSON bodies carried as strings read as objects, when it has any (so that the
    reference check reads the identifiers inside them)."""
    args = v.expanded(tool.arguments)
    return replace(tool, arguments=args) if args != dict(tool.arguments) else None


DETECTOR = Detector(name="content", modes=(MODE,), check=check)
