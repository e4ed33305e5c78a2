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
