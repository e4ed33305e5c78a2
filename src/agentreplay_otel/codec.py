"""Dataclass records to and from JSON: one mechanism for every record that crosses a process.

``to_json`` is ``dataclasses.asdict`` (a ``StrEnum`` is already a string); ``from_json``
walks the record's type hints, so nested records, lists, dicts, optional fields and enums
come back typed. Unknown keys are refused: a report from another version says so at once
instead of losing fields silently.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from typing import Any, TypeVar

T = TypeVar("T")


def to_doc(record: Any) -> Any:
    """The record as plain JSON-able data."""
    return dataclasses.asdict(record)


def to_json(record: Any, *, indent: int | None = None) -> str:
    return json.dumps(to_doc(record), indent=indent, ensure_ascii=False, default=str)


def from_doc(cls: type[T], doc: Any) -> T:
    """A ``cls`` record (a dataclass) from the data :func:`to_doc` made of one."""
    return typing.cast(T, _value(cls, doc))


def from_json(cls: type[T], text: str) -> T:
    return from_doc(cls, json.loads(text))


def _value(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        return _value(options[0], value) if len(options) == 1 else value
    if origin in (list, tuple):
        (item,) = typing.get_args(hint)[:1] or (Any,)
        return [_value(item, v) for v in value]
    if origin is dict:
        _, item = typing.get_args(hint) or (str, Any)
        return {k: _value(item, v) for k, v in value.items()}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _record(hint, value)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(value)
    return value


def _record(cls: type, doc: dict[str, Any]) -> Any:
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = set(doc) - names
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown field(s) {', '.join(sorted(unknown))}")
    return cls(**{k: _value(hints[k], v) for k, v in doc.items()})
