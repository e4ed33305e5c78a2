"""An LLM call's content stored once, and the replay body restored from it byte for byte.

The replay body (``agentreplay.request``, ``agentreplay.response``) and the GenAI conventions' view
(``gen_ai.system_instructions``, ``gen_ai.input.messages``, ``gen_ai.output.messages``) carry the
same strings: the conversation, the answer. :func:`store_once` keeps each long string of a view in
the view alone; in the body its JSON literal becomes a reference, ``{"agentreplay.ref":N}``, N its
place among the view's strings, so the body stays JSON. :func:`restore` gives the body back exactly,
from the span's own attributes. A body changes only if it restores exactly (checked as it is
made); the bodies changed are named in ``agentreplay.content.refs``. A string the body encodes
otherwise than the view (escaped non-ASCII, a stream's chunks) stays where it is: nothing is
guessed, nothing lost.

The recorder applies it before the hash chain, so the chain covers what is stored, and the
verifier, the collector and the store need nothing new. Part of the core: readers restore.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from json.encoder import encode_basestring
from typing import Any, Final

from agentreplay_otel import semconv
from agentreplay_otel.content import to_json_with_strings

try:
    import orjson as _orjson
except ImportError:  # optional: json.loads gives the same values
    _orjson = None  # type: ignore[assignment]

try:  # the body's replacements in C, where the SDK was built with it: the same body
    from agentreplay_otel._content import replaced as _compiled_replaced
except ImportError:  # installed without a C compiler
    _compiled_replaced = None  # type: ignore[assignment]

_VIEWS: Final = (
    (semconv.REQUEST, (semconv.GEN_AI_SYSTEM_INSTRUCTIONS, semconv.GEN_AI_INPUT_MESSAGES)),
    (semconv.RESPONSE, (semconv.GEN_AI_OUTPUT_MESSAGES,)),
)
_VIEW_NAMES: Final = tuple(name for _, views in _VIEWS for name in views)
_REF = '{"agentreplay.ref":'
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))  # as the client libraries encode
_literal: Callable[[str], str] = encode_basestring  # a string's JSON literal, as _ENCODER writes it
# agentreplay.content.refs as _ENCODER writes it, for the lists of changed bodies there can be
_LISTED: Final[dict[tuple[str, ...], str]] = {names: _ENCODER.encode(list(names)) for names in
                  ((semconv.REQUEST,), (semconv.RESPONSE,), (semconv.REQUEST, semconv.RESPONSE))}
SHARED_MIN_CHARS: Final = 32  # shorter strings cost less than their reference


def _loads(text: str) -> Any:
    """JSON to Python values; orjson where installed (the export thread runs this for every LLM span).
    Anything orjson refuses (a lone surrogate escape, say) is left to json.loads to accept or refuse."""
    if _orjson is not None:
        try:
            return _orjson.loads(text)
        except _orjson.JSONDecodeError:
            pass
    return json.loads(text)


# --- the views' strings as the recorder wrote them ---------------------------------------------
# The recorder writes a view from values it holds and walks them as it does (:func:`view_json`): their
# long strings are kept here, by the id of the text written, until the chain takes them with the span
# (:func:`taken_views`), so the export thread need not parse the text back to find them. A text is
# held while it is here (its id stays its own); one whose span is never chained (dropped, or no chain
# in this process) is let go when the table is full.
_written: dict[int, tuple[str, list[str]]] = {}
_WRITTEN_KEPT: Final = 1024  # texts
_WRITTEN_CHARS: Final = 1 << 23  # their characters, all together (an approximate count: no lock)
_written_chars = 0
_keeping = False  # set by the chain (:func:`keep_views`): nothing takes them otherwise


def keep_views() -> None:
    """Keep the strings of each view written from now on, for :func:`taken_views` (the chain's)."""
    global _keeping
    _keeping = True


def view_json(value: Any) -> str:
    """A view attribute's JSON (:func:`~agentreplay_otel.content.to_json`), its long strings kept for
    :func:`store_once` when the chain will take them."""
    global _written_chars
    text, strings = to_json_with_strings(value, SHARED_MIN_CHARS)
    if strings is not None and _keeping:
        if len(_written) >= _WRITTEN_KEPT or _written_chars > _WRITTEN_CHARS:
            _written.clear()
            _written_chars = 0
        _written[id(text)] = (text, strings)
        _written_chars += len(text)
    return text


Written = Mapping[str, tuple[str, list[str]]]
"""A span's view attributes as :func:`view_json` wrote them: the name, (the text, the strings it holds)."""


def taken_views(attributes: Mapping[str, Any]) -> Written:
    """What :func:`view_json` kept of a span's view attributes, taken out of the table (take it before
    anything changes the attributes: a view changed since, by redaction say, is then parsed back)."""
    global _written_chars
    found = {}
    for name in _VIEW_NAMES:
        text = attributes.get(name)
        if type(text) is str:
            entry = _written.pop(id(text), None)
            if entry is not None and entry[0] is text:
                found[name] = entry
                _written_chars -= len(text)
    return found


def _view_strings(attributes: Mapping[str, Any], views: tuple[str, ...], written: Written | None = None) -> list[str]:
    """The long strings of the view attributes, each once, in the order they are replaced (longest first).
    A view whose text is still the one :func:`view_json` wrote has them from there (``written``)."""
    seen: dict[str, None] = {}
    for name in views:
        text = attributes.get(name)
        if isinstance(text, str):
            entry = written.get(name) if written else None
            if entry is not None and entry[0] is text:
                seen.update(dict.fromkeys(entry[1]))  # keys seen before keep their place, as below
                continue
            try:
                value = _loads(text)
            except ValueError:
                continue
            try:
                _collect(value, seen)
            except RecursionError:  # nested past the interpreter's limit (json.loads goes deeper than orjson)
                _collect_flat(value, seen)
    return sorted(seen, key=len, reverse=True)


def _collect(value: Any, seen: dict[str, None]) -> None:
    """The long strings under ``value`` into ``seen``, in document order (each object's values, each
    list's items, depth first). Recursive: a message list is a few levels deep, and a call a level
    costs less than a stack's push and pop a value."""
    kind = type(value)
    if kind is dict:
        value = value.values()
    elif kind is not list:
        if kind is str and len(value) >= SHARED_MIN_CHARS:
            seen[value] = None
        return
    for item in value:
        if type(item) is str:
            if len(item) >= SHARED_MIN_CHARS:
                seen[item] = None
        elif type(item) is dict or type(item) is list:
            _collect(item, seen)


def _collect_flat(value: Any, seen: dict[str, None]) -> None:
    """:func:`_collect` without recursion, for any depth."""
    stack = [value]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            if len(value) >= SHARED_MIN_CHARS:
                seen[value] = None
        elif isinstance(value, dict):
            stack.extend(reversed(list(value.values())))
        elif isinstance(value, list):
            stack.extend(reversed(value))


_REFS: Final = tuple(f"{_REF}{index}}}" for index in range(64))  # the references most bodies need


def _ref(index: int) -> str:
    return _REFS[index] if index < len(_REFS) else f"{_REF}{index}}}"


_HEAD: Final = 16  # a literal's first characters, looked for before the whole


def _find(body: str, literal: str, start: int) -> int:
    """``body.find(literal, start)``, found as ``find`` of the literal's first characters with each place
    checked by ``startswith``: the same places, where ``find`` of a whole long literal first makes a
    table of all its characters, a pass over them for each search (~0.5 µs a conversation's message)."""
    head = literal[:_HEAD]
    at = body.find(head, start)
    while at >= 0 and not body.startswith(literal, at):
        at = body.find(head, at + 1)
    return at


def _replaced(body: str, literals: list[str]) -> tuple[str, int]:
    """The body with each literal replaced by its reference (as ``str.replace`` does, in turn: every
    occurrence, left to right, none overlapping), and how many replacements were made. Found with
    :func:`_find`, which scans the body once a literal where ``replace`` counts them first, then replaces."""
    made = 0
    for index, literal in enumerate(literals):
        at = _find(body, literal, 0)
        if at < 0:
            continue
        start = at + len(literal)
        then = _find(body, literal, start)
        if then < 0:  # the usual case: once
            body = body[:at] + _ref(index) + body[start:]
            made += 1
            continue
        pieces = [body[:at]]
        while then >= 0:
            pieces.append(body[start:then])
            start = then + len(literal)
            then = _find(body, literal, start)
        pieces.append(body[start:])
        made += len(pieces) - 1
        body = _ref(index).join(pieces)
    return body, made


def _replace(body: str, literals: list[str]) -> tuple[str, int]:
    """:func:`_replaced`, in C where the SDK was built with it and the body has UTF-8 (no lone surrogate)."""
    if _compiled_replaced is not None:
        done = _compiled_replaced(body, literals, _REFS)
        if done is not None:
            return done
    return _replaced(body, literals)


def _restored(body: str, literals: list[str]) -> str:
    for index in range(len(literals) - 1, -1, -1):
        body = body.replace(_ref(index), literals[index])
    return body


def _literals(strings: list[str]) -> list[str]:
    """Each string's JSON literal, encoded once for both the replacement and its check: orjson writes
    a string as :data:`_literal` does (~4x faster); one it refuses (a lone surrogate) takes the latter."""
    if _orjson is None:
        return [_literal(value) for value in strings]
    out = []
    for value in strings:
        try:
            out.append(_orjson.dumps(value).decode())
        except _orjson.JSONEncodeError:
            out.append(_literal(value))
    return out


def _restores(compact: str, made: int, literals: list[str], body: str) -> bool:
    """Whether ``compact`` (``made`` replacements in a body without a reference) restores to ``body``.

    Surely, and without restoring it, when every reference put in is still whole: its opening
    (``{"agentreplay.ref":``) is then found exactly ``made`` times. A later, shorter literal found
    across a reference put in before it would take part of that opening (a literal's only unescaped
    quotes are its first and last characters, and a reference's two quotes are within its opening), and
    no opening forms anew across a replacement's edges. Otherwise the body is restored and compared.
    """
    return compact.count(_REF) == made or _restored(compact, literals) == body


def store_once(attributes: dict[str, Any], written: Written | None = None) -> dict[str, Any]:
    """``attributes`` with the view's strings referenced from the bodies (changed in place).

    A body is changed only if it comes back exactly (:func:`restore`); the bodies changed are
    listed in ``agentreplay.content.refs``, so a reader knows what to restore. ``written``: what
    :func:`taken_views` gave for these attributes.
    """
    if semconv.CONTENT_REFS in attributes:
        return attributes
    changed = []
    for body_name, views in _VIEWS:
        body = attributes.get(body_name)
        if not isinstance(body, str) or _REF in body:
            continue
        literals = _literals(_view_strings(attributes, views, written))
        compact, made = _replace(body, literals) if literals else (body, 0)
        if made and _restores(compact, made, literals, body):
            attributes[body_name] = compact
            changed.append(body_name)
    if changed:
        listed = _LISTED.get(tuple(changed))
        attributes[semconv.CONTENT_REFS] = listed if listed is not None else _ENCODER.encode(changed)
    return attributes


def restore(attributes: Mapping[str, Any]) -> Mapping[str, Any]:
    """The attributes with the bodies :func:`store_once` referenced in full again (a new dict), or
    ``attributes`` themselves when none was."""
    listed = attributes.get(semconv.CONTENT_REFS)
    if not isinstance(listed, str):
        return attributes
    try:
        names = set(json.loads(listed))
    except (ValueError, TypeError):
        return attributes
    out = dict(attributes)
    for body_name, views in _VIEWS:
        body = out.get(body_name)
        if body_name in names and isinstance(body, str):
            out[body_name] = _restored(body, _literals(_view_strings(out, views)))
    return out
