"""The judge's endpoint: an OpenAI-compatible chat completions API (OpenAI, vLLM, Ollama's ``/v1``, any
gateway) through the ``openai`` client, or Anthropic's messages API through the ``anthropic`` client;
each answer forced into a JSON schema where the API allows it, parsed strictly, with one repair; and
the budget of one judged run in (estimated) tokens and in seconds.

The calls go out from the CLI's or the collector's process, which instrument nothing: they are never
recorded, least of all into the run being judged.
"""

from __future__ import annotations

import importlib
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentreplay_analysis.judging.log import tokens

OPENAI = "openai"
ANTHROPIC = "anthropic"
PROVIDERS = (OPENAI, ANTHROPIC)

CLIENTS = {OPENAI: "openai", ANTHROPIC: "anthropic"}
"""The client library each provider's judge is asked through: both come with the ``judge`` extra."""
INSTALL = "pip install 'agentreplay-replay[judge]'"


def client_missing(provider: str) -> str:
    """Why a judge of ``provider`` cannot be asked: its client library does not import (what to install);
    "" when it does."""
    name = CLIENTS[provider]
    try:
        importlib.import_module(name)
    except ImportError as exc:
        return (f"the {provider} judge needs the '{name}' package, which is not installed ({exc}): {INSTALL}, "
                f"or pip install {name}")
    return ""


JSON_SCHEMA = "json_schema"
JSON_OBJECT = "json_object"
NO_FORMAT = "none"
FORMATS = (JSON_SCHEMA, JSON_OBJECT, NO_FORMAT)
"""How an OpenAI-compatible endpoint is asked for JSON: ``response_format`` json_schema (strict; vLLM,
OpenAI, recent Ollama), json_object, or not at all (the prompt asks for it; the answer is parsed as strictly)."""


class Invalid(ValueError):
    """An answer that does not validate; the message says why (and is what the repair asks to fix)."""


class Unreachable(OSError):
    """The endpoint did not answer usably (down, slow, an HTTP error, not the API's response)."""


class Spent(RuntimeError):
    """The run's budget (tokens or seconds) is spent: the method stops where it is."""


@dataclass(frozen=True, kw_only=True)
class Endpoint:
    base_url: str
    model: str
    api_key: str = ""
    provider: str = OPENAI
    timeout_s: float = 120.0  # per call
    answer_tokens: int = 1_024
    temperature: float = 0.0
    response_format: str = JSON_SCHEMA


@dataclass
class Budget:
    """What one judged run may spend: prompt and answer tokens, estimated at four characters a token
    (the endpoints' own counts are reported, not budgeted), and seconds of wall time."""

    tokens: int
    seconds: float
    started: float = field(default_factory=time.monotonic)
    spent: int = 0

    def left_s(self) -> float:
        return self.seconds - (time.monotonic() - self.started)

    def charge(self, prompt_tokens: int) -> None:
        if self.spent + prompt_tokens > self.tokens:
            raise Spent(f"the token budget ({self.tokens}) is spent: {self.spent} used, the next prompt needs "
                        f"about {prompt_tokens}")
        if self.left_s() <= 0:
            raise Spent(f"the time budget ({self.seconds:g} s) is spent")
        self.spent += prompt_tokens


@dataclass(frozen=True, kw_only=True)
class Call:
    """One question the judge was asked, for the record: what it was about and what it cost."""

    kind: str  # "all_at_once", "step", "half", "window", "classify"
    about: str  # the window or step asked about ("#0-#12", "#7")
    prompt_tokens: int  # estimated
    reported_tokens: int  # as the endpoint counted them (0: not said)
    raw: str


class Asker:
    """Asks one endpoint, within one budget, keeping every call; each answer validated, one repair."""

    def __init__(self, endpoint: Endpoint, budget: Budget) -> None:
        self.endpoint = endpoint
        self.budget = budget
        self.calls: list[Call] = []
        self.repaired = 0
        self.sent: list[str] = []  # each prompt as sent (JSON), for the verdict's prompt hash
        self._client: Any = None

    def ask(self, kind: str, about: str, system: str, user: str, schema: dict[str, Any],
            validate: Callable[[dict[str, Any]], Any]) -> Any:
        """The validated answer to one question (``validate`` raises :class:`Invalid` to ask for a repair)."""
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        problem = ""
        for attempt in range(2):
            estimate = sum(tokens(m["content"]) for m in messages)
            self.budget.charge(estimate)
            self.sent.append(json.dumps(messages, ensure_ascii=False, sort_keys=True))
            raw, reported, answered = self._complete(messages, schema)
            self.budget.spent += answered or tokens(raw)
            self.calls.append(Call(kind=kind, about=about, prompt_tokens=estimate, reported_tokens=reported, raw=raw))
            try:
                return validate(json_answer(raw))
            except Invalid as exc:
                problem = str(exc)
                if attempt == 0:
                    self.repaired += 1
                    messages += [{"role": "assistant", "content": raw},
                                 {"role": "user", "content": f"That answer is not valid: {problem}. Answer again "
                                                             "with only the JSON object the schema describes."}]
        raise Invalid(f"the judge's answer did not validate twice (once after a repair request): {problem}")

    @property
    def last_raw(self) -> str:
        return self.calls[-1].raw if self.calls else ""

    def _timeout(self) -> float:
        left = self.budget.left_s()
        if left <= 0:
            raise Spent(f"the time budget ({self.budget.seconds:g} s) is spent")
        return min(self.endpoint.timeout_s, left)

    def _timed_out(self) -> Exception:
        if self.budget.left_s() <= 0.05:  # the call was given what was left of the run's time
            return Spent(f"the time budget ({self.budget.seconds:g} s) is spent (the last call was cut short)")
        return Unreachable("timed out")

    def _complete(self, messages: list[dict[str, str]], schema: dict[str, Any]) -> tuple[str, int, int]:
        """One answer: its text (an Anthropic tool call's input as JSON), the prompt and answer tokens
        the endpoint counted (0 if it did not say)."""
        if self.endpoint.provider == ANTHROPIC:
            return self._anthropic(messages, schema)
        return self._openai(messages, schema)

    def _openai(self, messages: list[dict[str, str]], schema: dict[str, Any]) -> tuple[str, int, int]:
        try:
            import openai
        except ImportError as exc:  # pragma: no cover - the judge needs it installed
            raise Unreachable(client_missing(OPENAI) or str(exc)) from exc
        e = self.endpoint
        if self._client is None:
            self._client = openai.OpenAI(base_url=e.base_url, api_key=e.api_key or "unused", max_retries=0,
                                         timeout=e.timeout_s)
        extra: dict[str, Any] = {}
        if e.response_format == JSON_SCHEMA:
            extra["response_format"] = {"type": "json_schema",
                                        "json_schema": {"name": str(schema.get("title", "answer")), "strict": True,
                                                        "schema": _bare(schema)}}
        elif e.response_format == JSON_OBJECT:
            extra["response_format"] = {"type": "json_object"}
        try:
            done = self._client.chat.completions.create(model=e.model, messages=messages, temperature=e.temperature,
                                                        max_tokens=e.answer_tokens, timeout=self._timeout(), **extra)
        except openai.APITimeoutError as exc:
            raise self._timed_out() from exc
        except openai.APIStatusError as exc:
            raise Unreachable(f"HTTP {exc.status_code}: {_said(exc)}") from exc
        except openai.APIError as exc:
            raise Unreachable(str(exc) or type(exc).__name__) from exc
        try:
            text = done.choices[0].message.content or ""
        except (AttributeError, IndexError, TypeError) as exc:
            raise Unreachable(f"not a chat completion: {str(done)[:200]}") from exc
        usage = getattr(done, "usage", None)
        return str(text), int(getattr(usage, "prompt_tokens", 0) or 0), int(getattr(usage, "completion_tokens", 0) or 0)

    def _anthropic(self, messages: list[dict[str, str]], schema: dict[str, Any]) -> tuple[str, int, int]:
        try:
            import anthropic
        except ImportError as exc:  # pragma: no cover - the judge needs it installed
            raise Unreachable(client_missing(ANTHROPIC) or str(exc)) from exc
        e = self.endpoint
        if self._client is None:
            base = re.sub(r"/v1/?$", "", e.base_url)  # the client adds /v1/messages
            self._client = anthropic.Anthropic(base_url=base, api_key=e.api_key or "unused", max_retries=0,
                                               timeout=e.timeout_s)
        name = str(schema.get("title", "answer"))
        tools = [{"name": name, "description": "Give your answer.", "input_schema": _bare(schema)}]
        try:
            done = self._client.messages.create(
                model=e.model, system=messages[0]["content"], messages=messages[1:], max_tokens=e.answer_tokens,
                tools=tools, tool_choice={"type": "tool", "name": name}, extra_body={"temperature": e.temperature},
                timeout=self._timeout())
        except anthropic.APITimeoutError as exc:
            raise self._timed_out() from exc
        except anthropic.APIStatusError as exc:
            raise Unreachable(f"HTTP {exc.status_code}: {_said(exc)}") from exc
        except anthropic.APIError as exc:
            raise Unreachable(str(exc) or type(exc).__name__) from exc
        text = ""
        for block in getattr(done, "content", None) or ():
            if getattr(block, "type", "") == "tool_use":
                text = json.dumps(block.input, ensure_ascii=False)
                break
            if getattr(block, "type", "") == "text":
                text += block.text
        usage = getattr(done, "usage", None)
        return text, int(getattr(usage, "input_tokens", 0) or 0), int(getattr(usage, "output_tokens", 0) or 0)


def _bare(schema: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in schema.items() if k != "title"}


def _said(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    text = json.dumps(body) if isinstance(body, dict) else str(getattr(exc, "message", "") or exc)
    return text[:300]


def json_answer(text: str) -> dict[str, Any]:
    """The JSON object in an answer: the text itself, or one fenced block (```json ...```)."""
    text = text.strip()
    fenced = re.search(r"```(?:json)?\s*(.*?)```", text, re.DOTALL)
    if fenced:
        text = fenced.group(1).strip()
    if not text.startswith("{") and "{" in text:
        text = text[text.index("{"): text.rindex("}") + 1]
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise Invalid(f"it is not JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise Invalid("it is not a JSON object")
    return doc
