"""agentreplay_otel.semconv against the ``opentelemetry-semantic-conventions`` package: one source of truth.

``semconv`` is part of the core, which imports nothing from ``opentelemetry``, so it spells the
conventions' names itself; these tests hold every one of them to the package's constant of the
same name, and to the package's current (not replaced, not removed) names.
"""

from __future__ import annotations

import ast
import inspect
import re
import warnings
from enum import Enum
from pathlib import Path
from types import ModuleType

import pytest
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes, openai_attributes
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics
from opentelemetry.semconv.attributes import error_attributes, server_attributes, service_attributes

from agentreplay_otel import semconv

_PACKAGE_MODULES: tuple[ModuleType, ...] = (
    gen_ai_attributes, openai_attributes, gen_ai_metrics, error_attributes, server_attributes, service_attributes,
)
# The namespaces the package defines; a name of ours in one of them must be the package's.
_CONVENTION_PREFIXES = ("gen_ai.", "openai.", "error.", "server.", "service.")
_METRIC_PREFIX = "METRIC_"  # ours: METRIC_X is the package's GEN_AI_CLIENT_X
# Other instrumentations' names, read in foreign traces and never written: some the conventions retired.
_READ_ONLY_PREFIXES = ("LEGACY_", "FOREIGN_")


def _ours() -> dict[str, str]:
    """Our constants whose values are convention names (attributes and metrics)."""
    return {name: value for name, value in vars(semconv).items()
            if name.isupper() and isinstance(value, str) and value.startswith(_CONVENTION_PREFIXES)
            and not name.startswith(_READ_ONLY_PREFIXES)}


def _package_name(ours: str) -> str:
    return "GEN_AI_CLIENT_" + ours[len(_METRIC_PREFIX):] if ours.startswith(_METRIC_PREFIX) else ours


def _package_constant(name: str) -> str | None:
    for module in _PACKAGE_MODULES:
        value = getattr(module, name, None)
        if isinstance(value, str):
            return value
    return None


def test_every_convention_name_is_the_package_constant_of_the_same_name():
    ours = _ours()
    assert len(ours) > 40  # the scan found them
    differ = {name: (value, _package_constant(_package_name(name))) for name, value in ours.items()
              if _package_constant(_package_name(name)) != value}
    assert differ == {}, "spelled unlike the package's constant of the same name (ours, the package's)"


def _retired() -> dict[str, str]:
    """Names the package keeps only as replaced or removed, with what it says of each."""
    retired = {}
    for module in _PACKAGE_MODULES:
        tree = ast.parse(inspect.getsource(module))
        body = tree.body
        for node, after in zip(body, body[1:], strict=False):
            if not (isinstance(node, ast.AnnAssign) and isinstance(node.value, ast.Constant)):
                continue
            doc = after.value.value if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) else ""
            if isinstance(doc, str) and re.search(r"Deprecated: (Replaced by|Removed)", doc):
                retired[node.value.value] = doc.strip().splitlines()[0]
    return retired


def test_no_convention_name_is_one_the_package_replaced_or_removed():
    retired = _retired()
    assert "gen_ai.system" in retired  # the scan reads the package's deprecation notes
    assert {name: retired[value] for name, value in _ours().items() if value in retired} == {}


def _enum(module: ModuleType, name: str) -> type[Enum]:
    with warnings.catch_warnings():  # the package marks its value enums as moved, not changed
        warnings.simplefilter("ignore")
        return getattr(module, name)


@pytest.mark.parametrize(("prefix", "enum"), [
    ("OP_", "GenAiOperationNameValues"),
    ("PROVIDER_", "GenAiProviderNameValues"),
    ("TOKEN_TYPE_", "GenAiTokenTypeValues"),
])
def test_well_known_values_are_the_packages(prefix, enum):
    values = {m.value for m in _enum(gen_ai_attributes, enum)}
    ours = {name: value for name, value in vars(semconv).items() if name.startswith(prefix)}
    assert ours and {name: value for name, value in ours.items() if value not in values} == {}


def test_openai_api_types_are_the_packages():
    values = {m.value for m in _enum(openai_attributes, "OpenaiApiTypeValues")}
    assert {semconv.OPENAI_API_CHAT_COMPLETIONS, semconv.OPENAI_API_RESPONSES} <= values


def test_names_read_in_foreign_traces_are_never_written():
    """The retired GenAI names, OpenLLMetry's and OpenInference's are read in other instrumentations' traces
    (a foreign run) and written by nothing of the SDK: only semconv spells them."""
    read_only = [name for name in vars(semconv)
                 if name.startswith((*_READ_ONLY_PREFIXES, "TRACELOOP_", "OI_", "LLM_REQUEST_TYPE"))]
    assert "LEGACY_GEN_AI_PROMPT" in read_only and "OI_INPUT_MESSAGES" in read_only
    package = Path(semconv.__file__).parent
    written = {str(path.relative_to(package)): name for path in package.rglob("*.py") if path.name != "semconv.py"
               for name in read_only if re.search(rf"\bsemconv\.{name}\b", path.read_text(encoding="utf-8"))}
    assert written == {}
