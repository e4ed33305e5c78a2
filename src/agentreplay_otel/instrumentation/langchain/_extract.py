"""A LangChain tool call as AgentReplay records it: pure functions over LangChain's own objects.

``BaseTool.run(tool_input, ..., tool_call_id=...)`` is where every call ends up (``invoke``
with a ``ToolCall`` from ``ToolNode``, ``invoke`` with a dict, ``run`` itself, and their async
forms). The arguments are the tool input as the model gave it, without what LangChain or
LangGraph inject (the run's state, store, runtime, callbacks); the result is what the model
gets back: a ``ToolMessage``'s content (with its artifact, for a ``content_and_artifact``
tool), or the tool's return value when it was invoked without a call id.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool

from agentreplay_otel.tools import ToolInvocation, ToolSpec, spec_of

_log = logging.getLogger(__name__)

CONTENT_AND_ARTIFACT = "content_and_artifact"
_STRING_INPUT = "input"  # the argument name of a string input when the tool declares none


def invocation(tool: BaseTool, args: tuple, kwargs: dict, *, is_async: bool) -> ToolInvocation:
    """The call ``run``/``arun`` was asked to make; never raises (a tool must not fail on our account)."""
    func = body_function(tool, is_async=is_async)
    description = tool.description if isinstance(tool.description, str) else ""
    spec = spec_of(func) or ToolSpec(name=str(tool.name), function=_qualified_name(func or type(tool)),
                                     description=description)
    if not spec.description and description:  # an @agentreplay_otel.tool without a docstring
        spec = dataclasses.replace(spec, description=description)
    tool_input = args[0] if args else kwargs.get("tool_input")
    call_id = kwargs.get("tool_call_id")
    return ToolInvocation(
        spec=spec,
        arguments=arguments(tool, tool_input),
        func=func or tool._run,  # noqa: SLF001 - the body, whose return type a replay's mock takes
        call_id=call_id if isinstance(call_id, str) else None,
    )


def body_function(tool: BaseTool, *, is_async: bool) -> Callable[..., Any] | None:
    """The function a ``StructuredTool``/``Tool`` runs (``@tool``, or a plain function ``ToolNode``
    wrapped); None for a ``BaseTool`` subclass, whose body is its own ``_run``/``_arun``."""
    coroutine = getattr(tool, "coroutine", None)
    func = getattr(tool, "func", None)
    found = (coroutine or func) if is_async else func
    return found if callable(found) else None


def arguments(tool: BaseTool, tool_input: Any) -> dict[str, Any]:
    """The tool input by argument name, as the model gave it (injected arguments left out)."""
    if isinstance(tool_input, dict):
        try:
            return dict(tool._filter_injected_args(tool_input))  # noqa: SLF001 - what LangChain's callbacks see
        except Exception:  # noqa: BLE001 - a schema LangChain cannot read: the input as given
            return dict(tool_input)
    try:
        name = next(iter(tool.args), _STRING_INPUT)
    except Exception:  # noqa: BLE001
        name = _STRING_INPUT
    return {name: tool_input}


def recorded_result(tool: BaseTool) -> Callable[[Any], Any]:
    """What the span keeps of ``run``'s output, and so what a replay hands the body back."""

    def recorded(output: Any) -> Any:
        if isinstance(output, ToolMessage):
            if tool.response_format == CONTENT_AND_ARTIFACT:
                return [output.content, output.artifact]
            return output.content
        return output

    return recorded


def body_value(tool: BaseTool, value: Any, call_id: str | None) -> Any:
    """The recorded result as the tool's body would have returned it, so LangChain builds the same
    output from it: the same ``ToolMessage`` content (already the string LangChain made), and for a
    ``content_and_artifact`` tool the ``(content, artifact)`` pair LangChain expects."""
    if tool.response_format != CONTENT_AND_ARTIFACT:
        return value
    if call_id is not None and isinstance(value, list) and len(value) == 2:
        return value[0], value[1]
    return value, None


def _qualified_name(obj: Any) -> str:
    module = getattr(obj, "__module__", None) or ""
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(obj).__qualname__
    return f"{module}.{name}" if module else str(name)
