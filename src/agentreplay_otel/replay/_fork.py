"""A fork's fix, applied to the requests the agent sends from the fork on.

The fix works on the JSON body the client library is about to send, the same canonical form
the recording keeps, so it applies alike to every entry point and both providers.

What reaches which call:

* the forked call gets the whole fix: system prompt, added user message, model, temperature, patch;
* every later live call of the same caller (the forked call's provider and recorded model) gets
  the system prompt, the model and the temperature again, and the added user message where its
  conversation continues the forked call's (the message stays where it was said);
* ``fix["only_at_fork"]`` keeps the fix to the forked call alone;
* the agent's other models (a summariser on another model or provider) answer as they did.

``--patch`` (an RFC 7386 merge patch over one call's arguments) is the forked call's only.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentreplay_otel import semconv
from agentreplay_otel.recording import Recording
from agentreplay_otel.replay._translate import Route, model_spec

ONLY_AT_FORK = "only_at_fork"  # the fix's key that keeps it to the forked call


@dataclass(frozen=True, kw_only=True)
class ForkedCall:
    """The forked call as the agent sent it: whose later calls the fix reaches, and the conversation
    the added user message was appended to (so later calls that continue it carry the message there)."""

    provider: str
    model: Any  # the recorded model id (the agent keeps asking for it; the fix's model answers)
    conversation: tuple[str, list[Any]] | None  # ("messages" | "input", the items before the message)

    def same_caller(self, provider: str, body: Mapping[str, Any]) -> bool:
        return provider == self.provider and body.get("model") == self.model


def forked_call(recording: Recording, fork_at: int, provider: str, body: Mapping[str, Any]) -> ForkedCall:
    """What the fork keeps of the forked call's request, before the fix."""
    recorded = recording.steps[fork_at] if fork_at < len(recording.steps) else None
    model = recorded.request.get("model") if recorded is not None else body.get("model")
    return ForkedCall(provider=provider, model=model, conversation=_conversation(body))


def apply_fix(body: Mapping[str, Any], fix: Mapping[str, Any], provider: str | None = None) -> dict[str, Any]:
    """The forked call's request with the whole fix: system prompt, an added message, model, temperature, patch."""
    out = copy.deepcopy(dict(body))
    if fix.get("system") is not None:
        _set_system(out, str(fix["system"]), provider)
    if fix.get("message") is not None:
        if isinstance(out.get("messages"), list):
            out["messages"] = [*out["messages"], _user(fix)]
        elif isinstance(out.get("contents"), list):
            out["contents"] = [*out["contents"], _user(fix, "contents")]
        elif "input" in out:
            prior = out["input"] if isinstance(out["input"], list) else [{"role": "user", "content": out["input"]}]
            out["input"] = [*prior, _user(fix)]
    if fix.get("model"):
        out["model"] = fix["model"]
    if fix.get("temperature") is not None:
        _set_temperature(out, float(fix["temperature"]))
    if fix.get("patch"):
        out = merge_patch(out, fix["patch"])
    return out


def carry_fix(body: dict[str, Any], fix: Mapping[str, Any], provider: str, forked: ForkedCall) -> dict[str, Any]:
    """A later live call's request with what the fix carries from the fork on (see the module's docstring)."""
    if fix.get(ONLY_AT_FORK) or not forked.same_caller(provider, body):
        return body
    out = copy.deepcopy(body)
    if fix.get("system") is not None:
        _set_system(out, str(fix["system"]), provider)
    if fix.get("message") is not None and forked.conversation is not None:
        key, before = forked.conversation
        items = out.get(key)
        if isinstance(items, list) and items[:len(before)] == before and items[len(before):len(before) + 1] \
                != [_user(fix, key)]:
            out[key] = [*before, _user(fix, key), *items[len(before):]]
    if fix.get("temperature") is not None:
        _set_temperature(out, float(fix["temperature"]))
    return out  # the model: fork_route, which also routes it


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
    if step != fork_at and (fix.get(ONLY_AT_FORK) or provider != forked.provider
                            or body.get("model") != forked.request.get("model")):
        return body, None
    named, model = model_spec(str(model))  # `fork --model anthropic:claude-haiku-4-5` names its provider too
    body = {**body, "model": model}
    target = str(fix.get("provider") or named or provider)
    if target == provider and not fix.get("base_url"):
        return body, None
    return body, Route(source=provider, target=target, model=str(model), base_url=fix.get("base_url"))


def _user(fix: Mapping[str, Any], key: str = "messages") -> dict[str, Any]:
    """The added user message, in the shape of the conversation it joins (Gemini's ``contents`` has parts)."""
    if key == "contents":
        return {"role": "user", "parts": [{"text": str(fix["message"])}]}
    return {"role": "user", "content": str(fix["message"])}


def _conversation(body: Mapping[str, Any]) -> tuple[str, list[Any]] | None:
    for key in ("messages", "contents", "input"):
        items = body.get(key)
        if isinstance(items, list):
            return key, copy.deepcopy(items)
    return None


def _set_system(body: dict[str, Any], text: str, provider: str | None) -> None:
    """The system prompt where the request's API keeps it: Anthropic's ``system``, Responses'
    ``instructions``, Gemini's ``systemInstruction``, else one system message first in chat
    completions' ``messages``."""
    if _gemini(body):
        body["systemInstruction"] = {"parts": [{"text": text}]}
        return
    if provider is None:  # not told: guessed from the body's shape
        anthropic = "system" in body or ("messages" in body and "max_tokens" in body and "input" not in body
                                         and not any(m.get("role") == "system" for m in body["messages"]))
        provider = semconv.PROVIDER_ANTHROPIC if anthropic else semconv.PROVIDER_OPENAI
    if provider == semconv.PROVIDER_ANTHROPIC:
        body["system"] = text
    elif "input" in body or "instructions" in body:
        body["instructions"] = text  # OpenAI Responses
    elif isinstance(body.get("messages"), list):
        rest = [m for m in body["messages"] if m.get("role") not in ("system", "developer")]
        body["messages"] = [{"role": "system", "content": text}, *rest]


def _gemini(body: Mapping[str, Any]) -> bool:
    """A Gemini request (generateContent), whatever its provider's name: ``contents``, no ``messages``."""
    return "contents" in body and "messages" not in body


def _set_temperature(body: dict[str, Any], value: float) -> None:
    """The temperature where the request's API keeps it: Gemini's ``generationConfig``, else the top level."""
    if _gemini(body):
        config = body.get("generationConfig")
        body["generationConfig"] = {**(config if isinstance(config, dict) else {}), "temperature": value}
    else:
        body["temperature"] = value


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
