"""The views' strings as the recorder writes them (store_once.view_json) stand in for parsing the views
back on the export thread: what is stored is the same either way, and a view changed after it was
written (redacted) is parsed back. The body's replacements are str.replace's, found with find."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentreplay_otel import semconv
from agentreplay_otel import store_once as so
from agentreplay_otel.content import to_json, to_json_with_strings

_TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=50) | st.sampled_from(
    ["x" * 40, "é" * 33, 'a "quoted" \\ line\nwith\ttabs and \x01 controls, long enough', "y" * 32, "z" * 31,
     "lone \ud800 surrogate, long enough to be shared"]
)
_TREES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _TEXT,
    lambda inner: st.lists(inner, max_size=5) | st.tuples(inner, inner)
    | st.dictionaries(_TEXT, inner, max_size=5),
    max_leaves=30,
)
_VIEWS = (semconv.GEN_AI_SYSTEM_INSTRUCTIONS, semconv.GEN_AI_INPUT_MESSAGES)


@settings(max_examples=300, deadline=None)
@given(tree=_TREES)
def test_the_strings_written_are_those_the_view_parsed_back_holds(tree: Any) -> None:
    text, strings = to_json_with_strings(tree, so.SHARED_MIN_CHARS)
    assert text == to_json(tree)
    if strings is not None:
        parsed = so._view_strings({semconv.GEN_AI_INPUT_MESSAGES: text}, (semconv.GEN_AI_INPUT_MESSAGES,))
        assert sorted(dict.fromkeys(strings), key=len, reverse=True) == parsed


@settings(max_examples=200, deadline=None)
@given(trees=st.tuples(_TREES, _TREES), picks=st.lists(st.integers(min_value=0, max_value=40), max_size=6))
def test_store_once_stores_the_same_with_the_written_strings(trees: tuple[Any, Any], picks: list[int]) -> None:
    so.keep_views()
    texts = [so.view_json(tree) for tree in trees]
    pool = [json.dumps(s, ensure_ascii=False) for tree in trees for s in _strings_in(tree)] or ['"none"']
    body = "[" + ",".join(pool[i % len(pool)] for i in picks) + "]"
    attributes = {**dict(zip(_VIEWS, texts, strict=True)), semconv.REQUEST: body}
    written = so.taken_views(attributes)
    assert so.store_once(dict(attributes), written) == so.store_once(dict(attributes))


def _strings_in(tree: Any) -> list[str]:
    if isinstance(tree, str):
        return [tree]
    if isinstance(tree, dict):
        tree = list(tree.values())
    if isinstance(tree, (list, tuple)):
        return [s for item in tree for s in _strings_in(item)]
    return []


def test_a_view_changed_after_it_was_written_is_parsed_back() -> None:
    so.keep_views()
    secret = "the customer's card number is 4111 1111 1111 1111, keep it"
    text = so.view_json([{"role": "user", "parts": [{"type": "text", "content": secret}]}])
    attributes = {semconv.GEN_AI_INPUT_MESSAGES: text,
                  semconv.REQUEST: json.dumps({"messages": [{"role": "user", "content": secret}]})}
    written = so.taken_views(attributes)
    assert written[semconv.GEN_AI_INPUT_MESSAGES] == (text, [secret])
    assert so.taken_views(attributes) == {}  # taken once
    redacted = {k: v.replace("4111 1111 1111 1111", "[card]") for k, v in attributes.items()}
    stored = so.store_once(dict(redacted), written)
    assert stored == so.store_once(dict(redacted))
    assert "4111" not in json.dumps(stored)


def test_the_table_lets_go_of_views_no_chain_takes() -> None:
    so.keep_views()
    for i in range(so._WRITTEN_KEPT * 2 + 5):
        so.view_json([f"a string long enough to be kept, number {i}"])
    assert 0 < len(so._written) <= so._WRITTEN_KEPT


_PIECES = st.sampled_from(["ab", "ba", "a", "b", '"', "{", "}", "aba", "x" * 5])


@settings(max_examples=500, deadline=None)
@given(body=st.lists(_PIECES, max_size=12).map("".join),
       literals=st.lists(st.lists(_PIECES, min_size=1, max_size=4).map("".join), min_size=1, max_size=4))
def test_the_replacements_are_str_replace_in_turn(body: str, literals: list[str]) -> None:
    expected, made = body, 0
    for index, literal in enumerate(literals):
        made += expected.count(literal)
        expected = expected.replace(literal, so._ref(index))
    assert so._replaced(body, literals) == (expected, made)


_LONG_PIECES = st.sampled_from(['"', "a" * 10, "ab" * 6, "b", "é", "\\\"", "x" * 17])


@settings(max_examples=500, deadline=None)
@given(body=st.lists(_LONG_PIECES, max_size=16).map("".join),
       literals=st.lists(st.lists(_LONG_PIECES, min_size=2, max_size=5).map("".join), min_size=1, max_size=4))
def test_literals_longer_than_the_head_looked_for_are_replaced_as_str_replace_does(
    body: str, literals: list[str]
) -> None:
    """Literals past the first characters looked for (so._HEAD), where those characters come back in
    places the whole literal is not: the same replacements as str.replace in turn."""
    expected, made = body, 0
    for index, literal in enumerate(literals):
        made += expected.count(literal)
        expected = expected.replace(literal, so._ref(index))
    assert so._replaced(body, literals) == (expected, made)
