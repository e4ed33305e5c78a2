"""A tool's result comes back from a replay as the type it was: each kind a replay rebuilds, once
through the codec and once recorded by ``@tool`` and answered by a replay; a case file's type tag that
names anything but a safe class already loaded is refused, and its JSON comes back as before."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import json
import sys
import uuid
from typing import Any, NamedTuple

import pydantic
import pytest

import agentreplay_otel
from agentreplay_otel import codec, semconv
from agentreplay_otel.content import to_json
from agentreplay_otel.replay import Plan, ReplaySession, install

attrs = pytest.importorskip("attrs")


class Invoice(pydantic.BaseModel):
    number: str
    total: decimal.Decimal
    due: datetime.date


@dataclasses.dataclass(frozen=True)
class Parcel:
    weight_kg: float
    shipped: datetime.datetime
    tags: frozenset[str] = frozenset()


@attrs.define
class Quote:
    carrier: str
    _price: decimal.Decimal  # a private attribute: attrs takes it as ``price``


class Status(enum.Enum):
    OPEN = "open"
    CLOSED = "closed"


class Point(NamedTuple):
    x: int
    y: int


def _round_trip(value: Any) -> Any:
    """``value`` through what the recorder writes (JSON text and tag text) and what a replay rebuilds."""
    typed = codec.typed(value)
    assert typed.opaque == ()
    text, tag = to_json(typed.plain), json.dumps(typed.tag)
    rebuilt = codec.rebuild(json.loads(text), json.loads(tag))
    assert rebuilt.refused == ()
    return rebuilt.value


def _same(value: Any) -> None:
    back = _round_trip(value)
    assert back == value and type(back) is type(value)


def test_pydantic_model():
    _same(Invoice(number="A-1", total=decimal.Decimal("12.50"), due=datetime.date(2025, 3, 1)))


def test_dataclass_with_typed_fields():
    back = _round_trip(Parcel(2.5, datetime.datetime(2025, 1, 2, 3, 4, 5, tzinfo=datetime.UTC), frozenset({"x"})))
    assert back == Parcel(2.5, datetime.datetime(2025, 1, 2, 3, 4, 5, tzinfo=datetime.UTC), frozenset({"x"}))
    assert type(back.shipped) is datetime.datetime and type(back.tags) is frozenset


def test_attrs_class():
    _same(Quote("DHL", decimal.Decimal("9.99")))


def test_enum():
    _same(Status.CLOSED)


def test_datetime():
    _same(datetime.datetime(2025, 6, 1, 12, 30, tzinfo=datetime.timezone(datetime.timedelta(hours=2))))


def test_date():
    _same(datetime.date(2025, 6, 1))


def test_time():
    _same(datetime.time(8, 15, 30))


def test_decimal():
    _same(decimal.Decimal("0.1000"))


def test_uuid():
    _same(uuid.UUID("12345678-1234-5678-1234-567812345678"))


def test_bytes():
    _same(b"\x00\xffbinary")


def test_tuple():
    _same((1, "a", datetime.date(2025, 1, 1)))


def test_set():
    _same({1, 2, 3})


def test_named_tuple():
    _same(Point(1, 2))


def test_nested_values_a_list_of_models_and_a_dict_of_dates():
    value = {"invoices": [Invoice(number=str(i), total=decimal.Decimal(i), due=datetime.date(2025, 1, i))
                          for i in range(1, 4)],
             "by_day": {"mon": datetime.date(2025, 1, 6), "note": "plain"}, "count": 3}
    back = _round_trip(value)
    assert back == value and all(type(i) is Invoice for i in back["invoices"])
    assert codec.typed(value).tag["values"]["invoices"].keys() == {"type", "each"}  # one tag for a list of alike


def test_plain_json_has_no_tag_and_is_written_as_before():
    value = {"a": [1, 2.5, "x", None, True], "b": {}}
    typed = codec.typed(value)
    assert typed.tag is None and typed.plain is value


@pytest.mark.parametrize("tag", [
    {"type": "dataclass", "class": "os:system"},  # a function, not a class
    {"type": "pydantic", "class": "subprocess:Popen"},  # a class, not of a safe kind
    {"type": "dataclass", "class": "subprocess:Popen"},
    {"type": "enum", "class": "builtins:type"},
    {"type": "attrs", "class": "builtins:eval"},
    {"type": "namedtuple", "class": "posix:system"},
    {"type": "dataclass", "class": "antigravity:Thing"},  # a module not imported: never imported for a tag
    {"type": "dataclass", "class": "tests.test_result_types:Parcel.__init__.__globals__"},
    {"type": "pydantic", "class": f"{__name__}:Parcel"},  # a safe class, but not the kind the tag says
])
def test_a_hostile_type_tag_is_refused_and_builds_nothing(tag: dict[str, Any]):
    doc = {"args": ["rm -rf /"], "weight_kg": 1.0}
    rebuilt = codec.rebuild(doc, tag)
    assert rebuilt.value == doc and rebuilt.refused == (tag["class"],)
    assert "antigravity" not in sys.modules


def test_fields_a_class_refuses_come_back_as_json():
    rebuilt = codec.rebuild({"number": "A-1"}, {"type": "pydantic", "class": f"{__name__}:Invoice"})
    assert rebuilt.value == {"number": "A-1"} and rebuilt.refused == (f"{__name__}:Invoice",)


def test_a_class_defined_in_a_function_is_said_opaque():
    @dataclasses.dataclass
    class Local:
        a: int

    typed = codec.typed(Local(1))
    assert typed.opaque == (codec.class_path(Local),)


# --- through @tool and a replay ----------------------------------------------------------------
class Handle:
    """An object JSON cannot hold: recorded as its repr, which a replay cannot rebuild."""


RESULTS: dict[str, Any] = {
    "model": Invoice(number="A-1", total=decimal.Decimal("12.50"), due=datetime.date(2025, 3, 1)),
    "dataclass": Parcel(2.5, datetime.datetime(2025, 1, 2, tzinfo=datetime.UTC)),
    "attrs": Quote("DHL", decimal.Decimal("9.99")),
    "enum": Status.OPEN,
    "datetime": datetime.datetime(2025, 6, 1, 12, 30),
    "decimal": decimal.Decimal("3.14"),
    "uuid": uuid.UUID(int=7),
    "bytes": b"abc",
    "tuple": (1, 2),
    "set": {"a", "b"},
    "nested": [{"when": datetime.date(2025, 1, 1), "items": (Status.CLOSED,)}],
}
RUNS = {"lookup": 0}


@agentreplay_otel.tool
def lookup(kind: str) -> Any:
    RUNS["lookup"] += 1
    return RESULTS[kind]


@agentreplay_otel.tool
def handle() -> Handle:
    return Handle()


def test_a_replayed_tool_returns_each_result_as_its_type(instrumented):
    kinds = list(RESULTS)
    recorded, recording, spans = instrumented.record_run(lambda: [lookup(k) for k in kinds])
    tool_spans = [s for s in spans if s.attributes.get(semconv.GEN_AI_TOOL_NAME) == "lookup"]
    assert all(semconv.TOOL_RESULT_TYPE in s.attributes for s in tool_spans)
    runs = RUNS["lookup"]
    session = ReplaySession(recording, Plan())
    install(session)
    replayed, _, _ = instrumented.record_run(lambda: [lookup(k) for k in kinds])
    assert RUNS["lookup"] == runs  # the body never ran
    assert session.finish().outcome == "matched"
    for kind, before, after in zip(kinds, recorded, replayed, strict=True):
        assert after == before and type(after) is type(before), kind


def test_a_result_no_replay_can_rebuild_is_said_once_at_record_time(instrumented, capsys):
    _, recording, _ = instrumented.record_run(lambda: [handle(), handle()])
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if "cannot rebuild" in line]
    assert len(said) == 1 and "'handle'" in said[0] and f"{__name__}:Handle" in said[0]
    install(ReplaySession(recording, Plan()))
    replayed, _, _ = instrumented.record_run(handle)
    assert isinstance(replayed, str) and replayed.startswith(f"<{__name__}.Handle object at 0x")  # as before


def test_a_class_not_loaded_in_the_replay_comes_back_as_json_and_is_said(instrumented, capsys):
    _, recording, _ = instrumented.record_run(lambda: lookup("model"))
    steps = [dataclasses.replace(s, result_type=s.result_type.replace(__name__, "not_a_loaded_module"))
             if s.result_type else s for s in recording.steps]
    install(ReplaySession(dataclasses.replace(recording, steps=steps), Plan()))
    capsys.readouterr()
    replayed, _, _ = instrumented.record_run(lambda: lookup("model"))
    assert replayed == {"number": "A-1", "total": "12.50", "due": "2025-03-01"}
    assert "not_a_loaded_module:Invoice" in capsys.readouterr().err


def test_a_langgraph_command_holding_tool_messages():
    types = pytest.importorskip("langgraph.types")
    messages = pytest.importorskip("langchain_core.messages")
    command = types.Command(update={"messages": [messages.ToolMessage("done", tool_call_id="c1")]}, goto="next")
    back = _round_trip(command)
    assert back == command and type(back.update["messages"][0]) is messages.ToolMessage
