"""Dataclass records to and from JSON: one mechanism for every record that crosses a process.

``to_json`` is ``dataclasses.asdict`` (a ``StrEnum`` is already a string); ``from_json``
walks the record's type hints, so nested records, lists, dicts, optional fields and enums
come back typed. Unknown keys are refused: a report from another version says so at once
instead of losing fields silently.

The second half does the same for values an agent's tools return (:func:`typed`, :func:`rebuild`):
each kept with a type tag, so a replay hands back a model, a date or a set, not its JSON.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import decimal
import enum
import json
import sys
import types
import typing
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
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


# --- values with their types: a tool's result, rebuilt in a replay ----------------------------
# A tool's result is recorded as JSON, which keeps neither a model's class nor a date's. Beside it
# the recorder keeps a *type tag* (:func:`typed`), and a replay rebuilds the value from both
# (:func:`rebuild`). A case file is untrusted, so its tags name classes, never code: a class is found
# only in a module this process has already imported (nothing is imported, no module ``__getattr__``
# runs), only if it is a pydantic model, a dataclass, an attrs class, an enum or a named tuple, the kind
# its tag says, and it is built only through its own constructor from the recorded fields.
# Anything else comes back as its JSON, as before.

Tag = dict[str, Any] | None  # None: plain JSON, nothing to rebuild
_LEAVES = (str, int, float, bool, type(None))
_SCALARS: dict[str, tuple[type, Callable[[Any], Any]]] = {
    "datetime": (datetime.datetime, datetime.datetime.fromisoformat),
    "date": (datetime.date, datetime.date.fromisoformat),
    "time": (datetime.time, datetime.time.fromisoformat),
    "decimal": (decimal.Decimal, decimal.Decimal),
    "uuid": (uuid.UUID, uuid.UUID),
    "bytes": (bytes, base64.b64decode),
    "bytearray": (bytearray, lambda text: bytearray(base64.b64decode(text))),
}
_COLLECTIONS: dict[str, Callable[[list[Any]], Any]] = {"tuple": tuple, "set": set, "frozenset": frozenset}


@dataclass(frozen=True)
class Typed:
    """A value as the recorder writes it (``plain``, for the content encoder) and its type tag;
    ``opaque``: the types in it that a replay cannot rebuild (module:qualified name)."""

    plain: Any
    tag: Tag
    opaque: tuple[str, ...] = ()


def class_path(cls: type) -> str:
    """``module:QualName``: how a tag names a class."""
    return f"{cls.__module__}:{cls.__qualname__}"


def class_kind(cls: Any) -> str | None:
    """Which kind of rebuildable class ``cls`` is, or None: the only classes a replay builds."""
    if not isinstance(cls, type):
        return None
    if issubclass(cls, enum.Enum):
        return "enum"
    pydantic = sys.modules.get("pydantic")
    if pydantic is not None and issubclass(cls, pydantic.BaseModel):
        return "pydantic"
    if dataclasses.is_dataclass(cls):
        return "dataclass"
    if isinstance(vars(cls).get("__attrs_attrs__"), tuple):
        return "attrs"
    if issubclass(cls, tuple) and isinstance(vars(cls).get("_fields"), tuple):
        return "namedtuple"
    return None


def loaded_class(path: str) -> type | None:
    """The class a tag names, from a module already imported, by plain dictionary lookups (no import,
    no ``__getattr__``); None when there is none."""
    module_name, _, qualname = path.partition(":")
    module = sys.modules.get(module_name)
    if module is None or not qualname or "<" in qualname:
        return None
    space: Mapping[str, Any] = vars(module)
    found: type | None = None
    for part in qualname.split("."):
        item = space.get(part)
        if not isinstance(item, type):
            return None
        found, space = item, vars(item)
    return found


def typed(value: Any) -> Typed:
    """``value`` as the recorder writes it, with its type tag (see above)."""
    walker = _Tagger()
    try:
        plain, tag = walker.walk(value)
    except RecursionError:  # a cycle, or nested past the interpreter's limit: as before, untagged
        return Typed(value, None)
    return Typed(plain, tag, tuple(dict.fromkeys(walker.opaque)))


class _Tagger:
    def __init__(self) -> None:
        self.opaque: list[str] = []

    def walk(self, value: Any) -> tuple[Any, Tag]:
        kind = type(value)
        if kind in _LEAVES:
            return value, None
        if isinstance(value, enum.Enum):
            plain, inner = self.walk(value.value)
            return plain, self._class_tag("enum", kind, value=inner)
        if kind is list or kind is dict:
            return self._container(value)
        cls_kind = class_kind(kind)
        if cls_kind == "pydantic":  # the content encoder dumps it (JSON mode); model_validate reads that
            return value, self._class_tag("pydantic", kind)
        if cls_kind == "dataclass" and not isinstance(value, type):
            return self._fields(kind, "dataclass", [f.name for f in dataclasses.fields(value)], value)
        if cls_kind == "attrs":
            return self._fields(kind, "attrs", [a.name for a in vars(kind)["__attrs_attrs__"]], value)
        if cls_kind == "namedtuple":
            plain, items = self._items(value)
            return plain, self._class_tag("namedtuple", kind, **items)
        if kind in (tuple, set, frozenset):
            plain, items = self._items(value)
            return plain, {"type": kind.__name__, **items}
        for name, (scalar, _) in _SCALARS.items():
            if isinstance(value, scalar):
                return _scalar_plain(name, value), {"type": name}
        if isinstance(value, (str, int, float)):  # a subclass: JSON writes it as the base type
            return value, None
        if isinstance(value, (list, dict)):
            return self._container(value)
        self.opaque.append(class_path(kind))
        return value, None

    def _container(self, value: list[Any] | dict[Any, Any]) -> tuple[Any, Tag]:
        if isinstance(value, dict):
            walked = {k: self.walk(v) for k, v in value.items()}
            tags = {str(k): t for k, (_, t) in walked.items() if t is not None}
            if not tags:
                return value, None
            return {k: p for k, (p, _) in walked.items()}, {"type": "dict", "values": tags}
        plain, items = self._items(value)
        return (plain, {"type": "list", **items}) if items else (value, None)

    def _items(self, value: Any) -> tuple[list[Any], dict[str, Any]]:
        """The items as written and their tags: ``each`` when all share one, ``items`` otherwise, none
        when no item has one."""
        walked = [self.walk(v) for v in value]
        plain = [p for p, _ in walked]
        tags = [t for _, t in walked]
        if all(t is None for t in tags):
            return plain, {}
        if len(tags) > 1 and all(t == tags[0] for t in tags):
            return plain, {"each": tags[0]}
        return plain, {"items": tags}

    def _fields(self, cls: type, kind: str, names: list[str], value: Any) -> tuple[Any, Tag]:
        walked = {name: self.walk(getattr(value, name)) for name in names}
        tags = {name: t for name, (_, t) in walked.items() if t is not None}
        return {name: p for name, (p, _) in walked.items()}, self._class_tag(kind, cls, fields=tags or None)

    def _class_tag(self, kind: str, cls: type, **inner: Any) -> Tag:
        path = class_path(cls)
        if loaded_class(path) is not cls:  # defined inside a function, or not reachable by its name
            self.opaque.append(path)
        return {"type": kind, "class": path, **{k: v for k, v in inner.items() if v is not None}}


def _scalar_plain(name: str, value: Any) -> Any:
    if name in ("bytes", "bytearray"):
        return base64.b64encode(value).decode("ascii")
    if name in ("decimal", "uuid"):
        return str(value)
    return value.isoformat()


@dataclass(frozen=True)
class Rebuilt:
    """A recorded value rebuilt from its tag; ``refused``: the classes it named that were not built."""

    value: Any
    refused: tuple[str, ...] = ()


def rebuild(plain: Any, tag: Any) -> Rebuilt:
    """The value :func:`typed` recorded, from its JSON and its tag; what cannot be rebuilt (a class not
    loaded here, not of a safe kind, fields its constructor refuses) stays as its JSON. Never raises."""
    builder = _Builder()
    try:
        value = builder.build(plain, tag)
    except RecursionError:
        return Rebuilt(plain, ("(nested too deep)",))
    return Rebuilt(value, tuple(dict.fromkeys(builder.refused)))


class _Builder:
    def __init__(self) -> None:
        self.refused: list[str] = []

    def build(self, plain: Any, tag: Any) -> Any:
        if not isinstance(tag, dict) or plain is None:
            return plain
        kind = tag.get("type")
        if kind in _SCALARS:
            return _scalar(kind, plain)
        if kind == "list" and isinstance(plain, list):
            return self._items(plain, tag)
        if kind in _COLLECTIONS and isinstance(plain, list):
            items = self._items(plain, tag)
            try:
                return _COLLECTIONS[kind](items)
            except TypeError:  # an unhashable item in a set: the list
                return items
        if kind == "dict" and isinstance(plain, dict):
            values = tag.get("values")
            values = values if isinstance(values, dict) else {}
            return {k: self.build(v, values.get(k)) for k, v in plain.items()}
        if kind in ("enum", "pydantic", "dataclass", "attrs", "namedtuple"):
            return self._instance(kind, plain, tag)
        return plain

    def _items(self, plain: list[Any], tag: dict[str, Any]) -> list[Any]:
        each, items = tag.get("each"), tag.get("items")
        if isinstance(items, list) and len(items) == len(plain):
            return [self.build(p, t) for p, t in zip(plain, items, strict=True)]
        return [self.build(p, each) for p in plain]

    def _instance(self, kind: str, plain: Any, tag: dict[str, Any]) -> Any:
        path = tag.get("class")
        cls = loaded_class(path) if isinstance(path, str) else None
        if cls is None or class_kind(cls) != kind:
            self.refused.append(str(path))
            return plain
        try:
            return self._construct(kind, cls, plain, tag)
        except Exception:  # noqa: BLE001 - fields the class refuses: the recorded JSON, as before
            self.refused.append(str(path))
            return plain

    def _construct(self, kind: str, cls: type, plain: Any, tag: dict[str, Any]) -> Any:
        if kind == "enum":
            return cls(self.build(plain, tag.get("value")))
        if kind == "pydantic":
            return cls.model_validate(plain)  # type: ignore[attr-defined]
        if kind == "namedtuple":
            return cls(*self._items(plain, tag)) if isinstance(plain, list) else plain
        if not isinstance(plain, dict):
            return plain
        fields = tag.get("fields")
        fields = fields if isinstance(fields, dict) else {}
        names = _init_names(cls, kind)
        return cls(**{names[k]: self.build(v, fields.get(k)) for k, v in plain.items() if k in names})


def _init_names(cls: type, kind: str) -> dict[str, str]:
    """The fields a class's constructor takes, by field name: the keyword each is passed as."""
    if kind == "dataclass":
        return {f.name: f.name for f in dataclasses.fields(cls) if f.init}
    return {a.name: getattr(a, "alias", None) or a.name.lstrip("_")
            for a in vars(cls)["__attrs_attrs__"] if a.init}


def _scalar(kind: str, plain: Any) -> Any:
    if not isinstance(plain, str):
        return plain
    try:
        return _SCALARS[kind][1](plain)
    except (ValueError, TypeError, ArithmeticError):  # not what the tag says: the text, as before
        return plain
