"""Pure functions from LangGraph objects (a compiled graph, a task, its writes) to attributes.

Nothing here imports LangGraph: the instrumentor must import without it. The few names of
LangGraph's internal channels are spelled here, and a test pins them to LangGraph's own.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from agentreplay_otel import semconv
from agentreplay_otel.content import to_json

# LangGraph's reserved names (langgraph.constants / langgraph._internal._constants).
START = "__start__"
RETURN = "__return__"  # the functional API's return value
TASKS = "__pregel_tasks"  # Send packets
BRANCH_PREFIX = "branch:to:"  # a conditional or fixed edge taken
DEFAULT_GRAPH_NAME = "LangGraph"


def graph_name(graph: Any, config: Mapping[str, Any]) -> str:
    """The caller's ``run_name``, else the compiled graph's name, else an entrypoint's function name."""
    run_name = config.get("run_name")
    if isinstance(run_name, str) and run_name:
        return run_name
    name = getattr(graph, "name", None)
    if isinstance(name, str) and name and name != DEFAULT_GRAPH_NAME:
        return name
    nodes = getattr(graph, "nodes", None)
    if isinstance(nodes, Mapping) and len(nodes) == 1:  # @entrypoint: one node, named after the function
        return str(next(iter(nodes)))
    return name if isinstance(name, str) and name else DEFAULT_GRAPH_NAME


def call_config(args: tuple, kwargs: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ``config`` of ``stream(input, config=None, ...)``, or an empty mapping."""
    config = kwargs.get("config", args[1] if len(args) > 1 else None)
    return config if isinstance(config, Mapping) else {}


def graph_attributes(name: str, config: Mapping[str, Any]) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        semconv.GEN_AI_OPERATION_NAME: semconv.OP_INVOKE_WORKFLOW,
        semconv.GEN_AI_WORKFLOW_NAME: name,
    }
    configurable = config.get("configurable")
    thread_id = configurable.get("thread_id") if isinstance(configurable, Mapping) else None
    if thread_id is not None:
        attributes[semconv.GEN_AI_CONVERSATION_ID] = str(thread_id)
    return attributes


def graph_span_name(name: str) -> str:
    return f"{semconv.OP_INVOKE_WORKFLOW} {name}"


def node_span_name(node: str) -> str:
    return f"{semconv.SPAN_GRAPH_NODE} {node}"


def task_step(task: Any) -> int | None:
    config = getattr(task, "config", None) or {}
    metadata = config.get("metadata") if isinstance(config, Mapping) else None
    step = metadata.get("langgraph_step") if isinstance(metadata, Mapping) else None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def node_attributes(task: Any, graph: str | None) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        semconv.GRAPH_NODE: str(task.name),
        semconv.GRAPH_TASK_ID: str(task.id),
    }
    if graph:  # the workflow the node runs in
        attributes[semconv.GEN_AI_WORKFLOW_NAME] = graph
    step = task_step(task)
    if step is not None:
        attributes[semconv.GRAPH_STEP] = step
    return attributes


def state_update(writes: Iterable[tuple[str, Any]]) -> tuple[Any, list[str]]:
    """A task's writes as ``(update, next_nodes)``.

    The update is what LangGraph's ``updates`` stream shows for the node: the state
    channels it wrote (a list of one-key mappings if it wrote a channel twice), or a
    functional-API task's return value. ``next_nodes`` are the nodes its edges,
    ``Command(goto=...)`` or ``Send`` packets routed to, in order.
    """
    state: list[tuple[str, Any]] = []
    next_nodes: list[str] = []
    for channel, value in writes:
        if channel == RETURN:
            return value, next_nodes
        if channel.startswith(BRANCH_PREFIX):
            next_nodes.append(channel[len(BRANCH_PREFIX):])
        elif channel == TASKS:
            node = getattr(value, "node", None)
            if isinstance(node, str):
                next_nodes.append(node)
        elif not channel.startswith("__") and ":" not in channel:  # skip join:, start: and reserved channels
            state.append((channel, value))
    if any(n > 1 for n in Counter(channel for channel, _ in state).values()):
        return [{channel: value} for channel, value in state], next_nodes
    return dict(state), next_nodes


def state_event_attributes(
    node: str, step: int | None, writes: Iterable[tuple[str, Any]], *, capture_content: bool
) -> dict[str, Any]:
    """Attributes of the ``agentreplay.state`` event recording one node's state transition."""
    update, next_nodes = state_update(writes)
    attributes: dict[str, Any] = {semconv.GRAPH_NODE: node}
    if step is not None:
        attributes[semconv.GRAPH_STEP] = step
    if next_nodes:
        attributes[semconv.GRAPH_NEXT] = next_nodes
    if capture_content:
        attributes[semconv.STATE_UPDATE] = to_json(update)
    return attributes
