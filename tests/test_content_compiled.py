"""The compiled content loops (``agentreplay_otel._content``) answer as the pure functions do.

``alike`` (the walk over a view's values, on the agent's thread) against ``content._alike`` on generated
trees of every value type, exact and subclassed, with the strings it collects; ``replaced`` (the body's
references, on the export thread) against ``store_once._replaced`` on bodies made of JSON literals with
every escape class, characters beyond ASCII and past the BMP, literals inside and across each other and
the references' own text; and what either cannot do (nesting past its depth, a lone surrogate) left to
the pure path with the same result. Where a C compiler is and the module is not built, these fail.
"""

from __future__ import annotations

import enum
import json
import shutil
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentreplay_otel import content, semconv
from agentreplay_otel import store_once as so

try:
    from agentreplay_otel import _content
except ImportError:  # installed without a C compiler
    _content = None  # type: ignore[assignment]


@pytest.fixture(autouse=True)
def built() -> None:
    """Built wherever a C compiler is (``make venv``), and what the recorder uses then."""
    if _content is None:
        if shutil.which("cc") is None:
            pytest.skip("no C compiler here: the SDK was installed without its compiled content loops")
        pytest.fail("a C compiler is here but agentreplay_otel._content is not built: run `make venv`")
    assert content._walk is _content.alike
    assert so._compiled_replaced is _content.replaced


class Colour(enum.Enum):
    RED = 1


class Text(str):
    pass


class Number(int):
    pass


_CHARS = st.sampled_from(["a", " ", '"', "\\", "\n", "\x00", "\x7f", "é", "€", "\u2028", "\U0001f600", "\ud800"])
_TEXT = st.one_of(st.text(max_size=40), st.lists(_CHARS, max_size=40).map("".join), st.just("x" * 35))
_LEAVES = st.one_of(
    _TEXT, st.integers(min_value=-(2**70), max_value=2**70), st.booleans(), st.none(), st.floats(),
    st.just(Colour.RED), _TEXT.map(Text), st.integers().map(Number), st.binary(max_size=4),
)
_TREES = st.recursive(
    _LEAVES,
    lambda inner: st.lists(inner, max_size=5) | st.tuples(inner, inner)
    | st.dictionaries(st.one_of(_TEXT, _TEXT.map(Text), st.integers(), st.none()), inner, max_size=5),
    max_leaves=40,
)


@settings(max_examples=1500, deadline=None)
@given(_TREES, st.sampled_from([0, 1, 32]), st.booleans())
def test_the_walk_answers_and_collects_as_the_pure_one(tree: Any, min_chars: int, collect: bool) -> None:
    compiled: list[str] | None = [] if collect else None
    pure: list[str] | None = [] if collect else None
    assert _content.alike(tree, min_chars, compiled) == content._alike(tree, min_chars, pure)
    assert compiled == pure


def test_nesting_past_its_depth_is_left_to_the_unbounded_walk() -> None:
    deep: Any = "a string long enough to be kept, at the bottom"
    for _ in range(500):
        deep = [deep]
    with pytest.raises(RecursionError):
        _content.alike(deep, 32, [])
    assert content.to_json_with_strings(deep, 32) == (json.dumps(deep, separators=(",", ":")), None)
    assert content.to_json(deep) == json.dumps(deep, separators=(",", ":"))


# --- the body's references ---------------------------------------------------------------------------
_STRINGS = st.lists(st.one_of(_TEXT, st.just('"agentreplay.ref":'), st.just("x" * 40)), min_size=1, max_size=6)


@st.composite
def bodies(draw: Any) -> tuple[str, list[str]]:
    """A body of JSON literals (and the references' own text) and literals to replace, longest first as
    store_once orders them: some of the body's, some of one another's parts, some absent."""
    strings = draw(_STRINGS)
    literals = [json.dumps(s, ensure_ascii=False) for s in strings]
    parts = draw(st.lists(st.one_of(st.sampled_from(literals), st.sampled_from(list(so._REFS[:3])),
                                    st.sampled_from(['{"agentreplay.ref":', ",", "}", '"'])), max_size=12))
    pieces = draw(st.lists(st.sampled_from(literals).flatmap(
        lambda lit: st.integers(0, len(lit)).map(lambda i: lit[i:] or lit)), max_size=2))
    wanted = sorted(set(draw(st.lists(st.sampled_from(literals), max_size=4)) + pieces), key=len, reverse=True)
    return "[" + "".join(parts) + "]", wanted


def _pure_or_none(body: str, literals: list[str]) -> Any:
    try:
        body.encode("utf-8")
        for literal in literals:
            literal.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return so._replaced(body, literals)


@settings(max_examples=1500, deadline=None)
@given(bodies())
def test_the_replacements_are_the_pure_ones(case: tuple[str, list[str]]) -> None:
    body, literals = case
    assert _content.replaced(body, literals, so._REFS) == _pure_or_none(body, literals)
    assert so._replace(body, literals) == so._replaced(body, literals)


def test_what_it_cannot_do_is_left_to_the_pure_function() -> None:
    literal = json.dumps("a string long enough to be kept, \ud800 and more", ensure_ascii=False)
    body = "[" + literal + "," + literal + "]"
    assert _content.replaced(body, [literal], so._REFS) is None  # a lone surrogate has no UTF-8
    assert so._replace(body, [literal]) == so._replaced(body, [literal]) == ("[" + so._REFS[0] + "," + so._REFS[0] + "]", 2)
    many = [json.dumps(f"string number {i} long enough to be shared") for i in range(len(so._REFS) + 2)]
    body = "[" + ",".join(many) + "]"
    assert _content.replaced(body, many, so._REFS) is None  # past the references it was given
    assert so._replace(body, many) == so._replaced(body, many)


@settings(max_examples=300, deadline=None)
@given(st.lists(_TEXT, min_size=1, max_size=5), st.lists(st.integers(0, 10), max_size=8))
def test_store_once_stores_the_same_with_and_without_it(strings: list[str], picks: list[int]) -> None:
    view = json.dumps([{"role": "user", "content": s} for s in strings], ensure_ascii=False)
    body = json.dumps({"messages": [{"role": "user", "content": strings[i % len(strings)]} for i in picks]},
                      ensure_ascii=False)
    attributes = {semconv.GEN_AI_INPUT_MESSAGES: view, semconv.REQUEST: body}
    compiled = so.store_once(dict(attributes))
    original = so._compiled_replaced
    try:
        so._compiled_replaced = None
        assert so.store_once(dict(attributes)) == compiled
    finally:
        so._compiled_replaced = original
    restored = dict(so.restore(compiled))
    restored.pop(semconv.CONTENT_REFS, None)
    assert restored == attributes
