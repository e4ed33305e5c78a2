"""store_once's faster paths (a recursive walk, orjson's string literals) find the same strings in the
same order and write the same literals as the plain walk and ``json``'s encoder: what is stored and
hashed does not depend on them."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from json.encoder import encode_basestring
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentreplay_otel import semconv
from agentreplay_otel import store_once as so


def _reference_strings(texts: list[str]) -> list[str]:
    """The strings as a plain stack walk of json.loads' values finds them."""
    seen: dict[str, None] = {}
    for text in texts:
        try:
            stack: list[Any] = [json.loads(text)]
        except ValueError:
            continue
        while stack:
            value = stack.pop()
            if isinstance(value, str):
                if len(value) >= so.SHARED_MIN_CHARS:
                    seen[value] = None
            elif isinstance(value, dict):
                stack.extend(reversed(list(value.values())))
            elif isinstance(value, list):
                stack.extend(reversed(value))
    return sorted(seen, key=len, reverse=True)


_TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=60) | st.sampled_from(
    ["x" * 40, "é" * 33, 'a "quoted" \\ line\nwith\ttabs and \x01 controls, long enough', "y" * 32, "z" * 31]
)
_TREES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _TEXT,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_TEXT, inner, max_size=5),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(trees=st.lists(_TREES, min_size=1, max_size=2), ascii_only=st.booleans())
def test_view_strings_and_literals_match_the_plain_walk_and_json(trees: list[Any], ascii_only: bool) -> None:
    texts = [json.dumps(tree, ensure_ascii=ascii_only) for tree in trees]
    views = (semconv.GEN_AI_SYSTEM_INSTRUCTIONS, semconv.GEN_AI_INPUT_MESSAGES)[: len(texts)]
    attributes = dict(zip(views, texts, strict=True))
    strings = so._view_strings(attributes, views)
    assert strings == _reference_strings(texts)
    assert so._literals(strings) == [encode_basestring(s) for s in strings]


def test_literals_match_json_for_every_code_point_and_a_lone_surrogate() -> None:
    every = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000)
    chunks = [every[i : i + 997] for i in range(0, len(every), 997)] + ["lone \ud800 surrogate, long enough to share"]
    assert so._literals(chunks) == [encode_basestring(s) for s in chunks]


@pytest.mark.skipif(so._orjson is None, reason="orjson reads nesting json.loads refuses this deep in a stack")
def test_a_view_nested_past_the_recursion_limit_is_walked_all_the_same() -> None:
    depth = sys.getrecursionlimit() - 200  # orjson reads it (its own limit); the recursive walk, called
    text = "[" * depth + json.dumps("d" * 40) + "]" * depth  # 300 frames down, runs out of stack
    attributes = {semconv.GEN_AI_OUTPUT_MESSAGES: text}

    def down(frames: int, then: Callable[[], Any]) -> Any:
        return down(frames - 1, then) if frames else then()

    with pytest.raises(RecursionError):  # the recursive walk alone, there
        down(300, lambda: so._collect(so._loads(text), {}))
    assert down(300, lambda: so._view_strings(attributes, (semconv.GEN_AI_OUTPUT_MESSAGES,))) == ["d" * 40]


_PIECES = st.sampled_from(['{"agentreplay.ref', '":0}', '":1}', "{", '"', ":", "}", "0", "x" * 30, "é", "\\"])


@settings(max_examples=500, deadline=None)
@given(
    values=st.lists(st.lists(_PIECES, min_size=1, max_size=6).map("".join), min_size=1, max_size=4),
    order=st.lists(st.integers(min_value=0, max_value=3), max_size=8),
    glue=st.lists(_PIECES, max_size=8),
)
def test_the_count_check_decides_as_restoring_the_body_does(
    values: list[str], order: list[int], glue: list[str]
) -> None:
    strings = sorted(dict.fromkeys(v for v in values if len(v) >= so.SHARED_MIN_CHARS), key=len, reverse=True)
    literals = so._literals(strings)
    if not literals:
        return
    body = "".join(g + literals[i % len(literals)] for g, i in zip(glue, order, strict=False)) + "".join(glue)
    if so._REF in body:
        return
    compact, made = so._replaced(body, literals)
    assert (made > 0) == (compact != body)
    assert so._restores(compact, made, literals, body) == (so._restored(compact, literals) == body)
    if compact.count(so._REF) == made:  # the shortcut's claim: restoring gives the body back
        assert so._restored(compact, literals) == body


def test_a_literal_found_across_a_reference_is_decided_by_restoring() -> None:
    long, across = "a" * 60, ":0}" + "b" * 40  # the second's literal begins inside the first's reference
    literals = so._literals([long, across])
    body = literals[0] + "b" * 40 + '"'
    compact, made = so._replaced(body, literals)
    assert compact == '{"agentreplay.ref{"agentreplay.ref":1}' and made == 2 and compact.count(so._REF) == 1
    assert so._restores(compact, made, literals, body)  # restored and compared: it comes back
    stored = so.store_once({semconv.GEN_AI_OUTPUT_MESSAGES: json.dumps([long, across]), semconv.RESPONSE: body})
    assert so.restore(stored)[semconv.RESPONSE] == body
