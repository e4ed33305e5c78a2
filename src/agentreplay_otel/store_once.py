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
from collections.abc import Mapping
from typing import Any, Final

from agentreplay_otel import semconv

_VIEWS: Final = (
    (semconv.REQUEST, (semconv.GEN_AI_SYSTEM_INSTRUCTIONS, semconv.GEN_AI_INPUT_MESSAGES)),
    (semconv.RESPONSE, (semconv.GEN_AI_OUTPUT_MESSAGES,)),
)
_REF = '{"agentreplay.ref":'
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))  # as the client libraries encode
SHARED_MIN_CHARS: Final = 32  # shorter strings cost less than their reference


def _view_strings(attributes: Mapping[str, Any], views: tuple[str, ...]) -> list[str]:
    """The long strings of the view attributes, each once, in the order they are replaced (longest first)."""
    seen: dict[str, None] = {}
    stack: list[Any] = []
    for name in views:
        text = attributes.get(name)
        if isinstance(text, str):
            try:
                stack.append(json.loads(text))
            except ValueError:
                continue
            while stack:
                value = stack.pop()
                if isinstance(value, str):
                    if len(value) >= SHARED_MIN_CHARS:
                        seen[value] = None
                elif isinstance(value, dict):
                    stack.extend(reversed(list(value.values())))
                elif isinstance(value, list):
                    stack.extend(reversed(value))
    return sorted(seen, key=len, reverse=True)


def _replaced(body: str, strings: list[str]) -> str:
    for index, value in enumerate(strings):
        body = body.replace(_ENCODER.encode(value), f"{_REF}{index}}}")
    return body


def _restored(body: str, strings: list[str]) -> str:
    for index in range(len(strings) - 1, -1, -1):
        body = body.replace(f"{_REF}{index}}}", _ENCODER.encode(strings[index]))
    return body


def store_once(attributes: dict[str, Any]) -> dict[str, Any]:
    """``attributes`` with the view's strings referenced from the bodies (changed in place).

    A body is changed only if it comes back exactly (:func:`restore`); the bodies changed are
    listed in ``agentreplay.content.refs``, so a reader knows what to restore.
    """
    if semconv.CONTENT_REFS in attributes:
        return attributes
    changed = []
    for body_name, views in _VIEWS:
        body = attributes.get(body_name)
        if not isinstance(body, str) or _REF in body:
            continue
        strings = _view_strings(attributes, views)
        compact = _replaced(body, strings) if strings else body
        if compact != body and _restored(compact, strings) == body:
            attributes[body_name] = compact
            changed.append(body_name)
    if changed:
        attributes[semconv.CONTENT_REFS] = _ENCODER.encode(changed)
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
            out[body_name] = _restored(body, _view_strings(out, views))
    return out
