"""A fork's fix, applied to the request body at the fork step (system prompt, a message, model, ...).

The fix works on the JSON body the client library is about to send, the same canonical form
the recording keeps, so it applies alike to every entry point and both providers.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from agentreplay_otel.recording import Recording
from agentreplay_otel.replay._translate import Route, model_spec


def apply_fix(body: Mapping[str, Any], fix: Mapping[str, Any]) -> dict[str, Any]:
    """The request with the fork's fix: system prompt, an added message, model, temperature, patch."""
    out = copy.deepcopy(dict(body))
    if fix.get("system") is not None:
        _set_system(out, str(fix["system"]))
    if fix.get("message") is not None:
        if "messages" in out:
            out["messages"] = [*out["messages"], {"role": "user", "content": str(fix["message"])}]
        elif "input" in out:
            prior = out["input"] if isinstance(out["input"], list) else [{"role": "user", "content": out["input"]}]
            out["input"] = [*prior, {"role": "user", "content": str(fix["message"])}]
    if fix.get("model"):
        out["model"] = fix["model"]
    if fix.get("temperature") is not None:
        out["temperature"] = float(fix["temperature"])
    if fix.get("patch"):
        out = merge_patch(out, fix["patch"])
    return out


def fork_route(recording: Recording, fix: Mapping[str, Any], fork_at: int | None, step: int, provider: str,
               body: dict[str, Any]) -> tuple[dict[str, Any], Route | None]:
    """The fix's model on every live call the recorded model answered, from the fork on, and the
    route to it when it is another provider's (``fix["provider"]``, or ``provider:model``) or
    endpoint (``fix["base_url"]``).

    The agent's other models (a summariser on another provider) answer as they did."""
    model = fix.get("model")
    if not model or fork_at is None or fork_at >= len(recording.steps):
        return body, None
    forked = recording.steps[fork_at]
    if step != fork_at and (provider != forked.provider or body.get("model") != forked.request.get("model")):
        return body, None
    named, model = model_spec(str(model))  # `fork --model anthropic:claude-haiku-4-5` names its provider too
    body = {**body, "model": model}
    target = str(fix.get("provider") or named or provider)
    if target == provider and not fix.get("base_url"):
        return body, None
    return body, Route(source=provider, target=target, model=str(model), base_url=fix.get("base_url"))


def _set_system(body: dict[str, Any], text: str) -> None:
    if "system" in body or ("messages" in body and "max_tokens" in body and "input" not in body
                            and not any(m.get("role") == "system" for m in body["messages"])):
        body["system"] = text  # Anthropic
    elif "input" in body:
        body["instructions"] = text  # OpenAI Responses
    elif "messages" in body:
        rest = [m for m in body["messages"] if m.get("role") not in ("system", "developer")]
        body["messages"] = [{"role": "system", "content": text}, *rest]


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result
