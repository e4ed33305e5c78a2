"""How Grafana and its ClickHouse plugin turn a panel's SQL into the query ClickHouse runs,
re-implemented for the dashboard tests (``test_grafana.py``); importable by name.

A panel's SQL goes through three steps, and only what survives all three is valid:

1. the plugin (in the browser) replaces each ``$__conditionalAll(condition, $var)``, last first:
   by ``1=1`` when the variable's value is All (``$__all``) or empty, else by ``condition``.
   The variable is found in the second argument only as a plain ``$var`` or ``${var}``;
2. Grafana's template service replaces ``$var``, ``${var}``, ``${var:format}`` and ``[[var]]``.
   A format named in the SQL wins; without one the plugin's own applies, which quotes a list
   (``'a','b'``) but leaves a single value *as it is, unquoted*. A variable set to All stands for
   every option's value (or its custom all value, inserted raw, whatever the format);
3. the plugin's backend expands its macros (``$__timeFilter(col)``, ``$__fromTime``,
   ``$__timeInterval(col)``, ``$__interval_s``, ...) from the panel's time range and interval;
   a macro it does not know stays as it is.

Only what the dashboards can reach is here; each step is checked against examples from the
plugin's and Grafana's own tests and documentation. A format Grafana has but this module does
not raises rather than guessing.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

ALL = "$__all"
"""The value Grafana gives a variable set to All."""

Value = str | list[str]


@dataclass(frozen=True, kw_only=True)
class Variable:
    """A dashboard variable as it stands when a panel runs: ``value`` is what the dashboard holds
    (a string; a list for a multi-value variable; ``ALL`` or ``[ALL]`` for All)."""

    name: str
    value: str | tuple[str, ...]
    options: tuple[str, ...] = ()
    all_value: str | None = None  # the variable's "custom all value"

    def is_all(self) -> bool:
        return self.value == ALL or (isinstance(self.value, tuple) and self.value[:1] == (ALL,))

    def as_js_string(self) -> str:
        """``current.value.toString()``: what ``$__conditionalAll`` compares (a list joins with ``,``)."""
        return ",".join(self.value) if isinstance(self.value, tuple) else self.value

    def interpolated(self) -> Value | _CustomAll:
        """The value formats see: All is every option's value, or the custom all value."""
        if self.is_all():
            return _CustomAll(self.all_value) if self.all_value is not None else list(self.options)
        return list(self.value) if isinstance(self.value, tuple) else self.value


@dataclass(frozen=True)
class _CustomAll:
    text: str


@dataclass(frozen=True, kw_only=True)
class TimeRange:
    """The panel's time range and the interval Grafana picked for it."""

    start: dt.datetime
    end: dt.datetime
    interval: dt.timedelta = dt.timedelta(minutes=1)


def interpolate(sql: str, variables: Sequence[Variable], time_range: TimeRange) -> str:
    """The SQL ClickHouse receives for ``sql`` (a panel's or a variable's query)."""
    named = {v.name: v for v in variables}
    sql = apply_conditional_all(sql, named)
    sql = replace_variables(sql, named)
    return expand_macros(sql, time_range)


# --- step 1: $__conditionalAll ---------------------------------------------------------------------
_CONDITIONAL_ALL = "$__conditionalAll("
_VARIABLE_IN_ARGUMENT = re.compile(r"(?<=\$\{)[\w\d]+(?=\})|(?<=\$)[\w\d]+", re.ASCII)


def apply_conditional_all(sql: str, variables: Mapping[str, Variable]) -> str:
    start = sql.rfind(_CONDITIONAL_ALL)
    while start != -1:
        args = macro_args(sql, start + len(_CONDITIONAL_ALL) - 1)
        if len(args) != 2:
            return sql
        phrase = args[0]
        found = _VARIABLE_IN_ARGUMENT.search(args[1].strip())
        variable = variables.get(found.group()) if found else None
        if variable is not None and variable.as_js_string() in ("", ALL):
            phrase = "1=1"
        sql = _js_replace_first(sql, f"{_CONDITIONAL_ALL}{args[0]},{args[1]})", phrase)
        start = sql.rfind(_CONDITIONAL_ALL)
    return sql


def macro_args(sql: str, open_paren: int) -> list[str]:
    """The arguments of the call whose ``(`` is at ``open_paren``: split at commas one bracket deep,
    quotes not considered; [] if it never closes (the plugin's own parser)."""
    text = sql[open_paren:]
    args: list[str] = []
    depth, last = 0, 1
    for token in re.finditer(r"[(),]", text):
        if token.group() == "(":
            depth += 1
        elif token.group() == ")":
            depth -= 1
        if token.group() == "," and depth == 1:
            args.append(text[last : token.start()])
            last = token.end()
        if depth == 0:
            args.append(text[last : token.start()])
            return args
    return []


def _js_replace_first(text: str, pattern: str, replacement: str) -> str:
    """JavaScript's ``String.prototype.replace`` with a string pattern: the first occurrence, and
    ``$$``, ``$&``, ``$``` and ``$'`` in the replacement mean what they mean there."""
    at = text.find(pattern)
    if at == -1:
        return text
    before, after = text[:at], text[at + len(pattern) :]
    special = {"$$": "$", "$&": pattern, "$`": before, "$'": after}
    expanded = re.sub(r"\$[$&`']", lambda m: special[m.group()], replacement)
    return before + expanded + after


# --- step 2: template variables ---------------------------------------------------------------------
_TEMPLATE = re.compile(
    r"\$(\w+)|\[\[(\w+?)(?::(\w+))?\]\]|\$\{(\w+)(?:\.([^:^\}]+))?(?::([^\}]+))?\}", re.ASCII
)


def plugin_format(value: Value) -> str:
    """The ClickHouse plugin's formatter, used when the SQL names none: a list is quoted and
    joined, a single value goes in unquoted."""
    return "'" + "','".join(value) + "'" if isinstance(value, list) else value


def _each(quote: Callable[[str], str]) -> Callable[[Value], str]:
    return lambda value: ",".join(map(quote, value)) if isinstance(value, list) else quote(value)


def _joined(separator: str) -> Callable[[Value], str]:
    return lambda value: separator.join(value) if isinstance(value, list) else value


_SQLSTRING_ESCAPES = {"'": "''", '"': '\\"'}

FORMATS: dict[str, Callable[[Value], str]] = {
    "singlequote": _each(lambda v: "'" + v.replace("'", "\\'") + "'"),
    "doublequote": _each(lambda v: '"' + v.replace('"', '\\"') + '"'),
    "sqlstring": _each(lambda v: "'" + re.sub("['\"]", lambda m: _SQLSTRING_ESCAPES[m.group()], v) + "'"),
    "csv": _joined(","),
    "raw": _joined(","),  # String(value): a list joins with ","
    "pipe": _joined("|"),
    "glob": lambda value: "{" + ",".join(value) + "}" if isinstance(value, list) and len(value) > 1
    else _joined(",")(value),
}
"""Grafana's formats the dashboards may use, as its format registry writes them."""

_GRAFANA_ONLY = {
    "lucene", "regex", "distributed", "html", "json", "percentencode", "join", "date", "text", "queryparam",
    "customqueryparam", "uriencode",
}
"""Formats Grafana has and this module does not: using one fails the test instead of guessing."""

_TEXT_LIKE = {"text", "percentencode", "queryparam"}  # the formats a custom all value is not raw for


def replace_variables(
    sql: str, variables: Mapping[str, Variable], default: Callable[[Value], str] = plugin_format
) -> str:
    def substitute(match: re.Match[str]) -> str:
        name = match[1] or match[2] or match[4]
        fmt = match[3] or match[6]
        variable = variables.get(name)
        if variable is None:
            return match[0]  # not a variable: left as written (the plugin's macros, for one)
        if match[5]:
            raise NotImplementedError(f"field paths ({match[0]}) are not re-implemented")
        value = variable.interpolated()
        if isinstance(value, _CustomAll):
            if fmt in _TEXT_LIKE:
                raise NotImplementedError(f"a custom all value with :{fmt} is not re-implemented")
            return value.text
        if fmt is None:
            return default(value)
        fmt_name = fmt.split(":")[0]
        if fmt_name in _GRAFANA_ONLY:
            raise NotImplementedError(f"Grafana's :{fmt_name} format is not re-implemented here")
        return FORMATS.get(fmt_name, FORMATS["glob"])(value)  # an unknown format falls back to glob

    return _TEMPLATE.sub(substitute, sql)


# --- step 3: the plugin's backend macros -------------------------------------------------------------
def _seconds(t: dt.datetime) -> str:
    return f"toDateTime({int(t.timestamp() // 1)})"


def _millis(t: dt.datetime) -> str:
    return f"fromUnixTimestamp64Milli({int(t.timestamp() * 1000 // 1)})"


def _date(t: dt.datetime) -> str:
    return f"toDate('{t.astimezone(dt.UTC).strftime('%Y-%m-%d')}')"


def _between(column: str, low: str, high: str) -> str:
    return f"{column} >= {low} AND {column} <= {high}"


def _interval_s(r: TimeRange) -> int:
    return max(int(r.interval.total_seconds()), 1)


def _interval_ms(r: TimeRange) -> int:
    return max(int(r.interval.total_seconds() * 1000), 1)


_Macro = Callable[[TimeRange, list[str]], str]

MACROS: dict[str, tuple[int, _Macro]] = {  # name: (arguments, expansion)
    "timeFilter": (1, lambda r, a: _between(a[0], _seconds(r.start), _seconds(r.end))),
    "timeFilter_ms": (1, lambda r, a: _between(a[0], _millis(r.start), _millis(r.end))),
    "dateFilter": (1, lambda r, a: _between(a[0], _date(r.start), _date(r.end))),
    "timeFrom": (1, lambda r, a: f"{a[0]} >= {_seconds(r.start)}"),
    "timeTo": (1, lambda r, a: f"{a[0]} <= {_seconds(r.end)}"),
    "fromTime": (0, lambda r, a: _seconds(r.start)),
    "toTime": (0, lambda r, a: _seconds(r.end)),
    "fromTime_ms": (0, lambda r, a: _millis(r.start)),
    "toTime_ms": (0, lambda r, a: _millis(r.end)),
    "timeInterval": (1, lambda r, a: f"toStartOfInterval(toDateTime({a[0]}), INTERVAL {_interval_s(r)} second)"),
    "timeInterval_ms": (
        1, lambda r, a: f"toStartOfInterval(toDateTime64({a[0]}, 3), INTERVAL {_interval_ms(r)} millisecond)"
    ),
    "interval_s": (0, lambda r, a: str(_interval_s(r))),
}
_MACRO = re.compile(r"\$__(\w+)", re.ASCII)


def expand_macros(sql: str, time_range: TimeRange) -> str:
    out: list[str] = []
    at = 0
    for found in _MACRO.finditer(sql):
        if found.start() < at:
            continue  # inside the arguments of a macro already expanded
        known = MACROS.get(found[1])
        if known is None:
            continue  # unknown: left as it is
        arity, expand = known
        args: list[str] = []
        end = found.end()
        if arity:
            args = [a.strip() for a in macro_args(sql, end)] if sql[end : end + 1] == "(" else []
            if len(args) != arity:
                raise ValueError(f"$__{found[1]} expects {arity} argument(s), got {len(args)}: {sql[found.start():]}")
            end += len(",".join(macro_args(sql, end))) + 2
        out += [sql[at : found.start()], expand(time_range, args)]
        at = end
    return "".join(out) + sql[at:]
