"""The LLM judge: a model behind any OpenAI-compatible endpoint (vLLM, a hosted API) classifies a run
with the MAST definitions, its answer forced by a JSON schema.

An answer that fails validation gets one repair attempt (the model is told what was wrong); a
second failure is a ``judge_error`` verdict with the raw answer kept. An endpoint that is down,
slow or answering garbage is a ``judge_error`` too, with the reason: the judge never raises and
never invents a verdict.

The judge's calls go out through the standard library's HTTP client, which nothing in this
project instruments, from the CLI's process, which records no run: they are never recorded,
least of all into the run being judged.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, replace
from typing import Any

from agentreplay_otel.core import semconv
from agentreplay_replay.analysis.prompt import RESPONSE_FORMAT, VERDICTS, Prompt, build
from agentreplay_replay.analysis.taxonomy import BY_ID
from agentreplay_replay.analysis.transcript import RunView
from agentreplay_replay.analysis.verdict import (
    LLM,
    Culprit,
    Evidence,
    Fix,
    ModeHit,
    Outcome,
    Verdict,
    primary,
)

ENV_BASE_URL = semconv.ENV_ANALYSIS_BASE_URL
ENV_API_KEY = semconv.ENV_ANALYSIS_API_KEY
ENV_MODEL = semconv.ENV_ANALYSIS_MODEL
"""Where the judge is, by default (flags override): an OpenAI-compatible base URL (``.../v1``), its key, a model."""


@dataclass(frozen=True, kw_only=True)
class JudgeConfig:
    base_url: str
    model: str
    api_key: str = ""
    timeout_s: float = 120.0
    context_tokens: int = 16_384  # the judge model's context window
    answer_tokens: int = 1_024  # room kept for its answer
    temperature: float = 0.0

    @classmethod
    def from_env(cls, *, base_url: str | None = None, model: str | None = None, api_key: str | None = None,
                 **options: Any) -> JudgeConfig | None:
        """Flags first, then ``AGENTREPLAY_ANALYSIS_*``; None when no endpoint or model is known."""
        url = base_url or os.environ.get(ENV_BASE_URL, "")
        name = model or os.environ.get(ENV_MODEL, "")
        if not url or not name:
            return None
        return cls(base_url=url.rstrip("/"), model=name, api_key=api_key or os.environ.get(ENV_API_KEY, ""),
                   **options)


class _Invalid(ValueError):
    """The judge's answer does not validate; the message says why (and is what the repair asks to fix)."""


class _Unreachable(OSError):
    """The endpoint did not answer usably (down, slow, an HTTP error, not an OpenAI-style response)."""


def judge(view: RunView, config: JudgeConfig) -> Verdict:
    """The judge's verdict on one run; ``judge_error`` (never an exception) when it gives none."""
    started = time.perf_counter()
    prompt = build(view, context_tokens=config.context_tokens, answer_tokens=config.answer_tokens)
    base = Verdict(run_id=view.run_id, outcome=Outcome.JUDGE_ERROR, classifier=LLM, model=config.model,
                   chain_hash=view.chain_hash, prompt_sha256=prompt.sha256, context_cut=prompt.cut,
                   prompt_tokens=prompt.tokens)

    def failed(error: str, raw: str = "") -> Verdict:
        return _replace(base, error=error, raw=raw, elapsed_ms=(time.perf_counter() - started) * 1000)

    messages = list(prompt.messages)
    raw = ""
    problem = ""
    for attempt in range(2):
        try:
            raw, usage = _complete(config, messages)
        except _Unreachable as exc:
            return failed(f"the judge at {config.base_url} ({config.model}) gave no answer: {exc}", raw)
        try:
            verdict = _verdict(view, prompt, json_answer(raw))
        except _Invalid as exc:
            problem = str(exc)
            if attempt == 0:
                messages += [{"role": "assistant", "content": raw},
                             {"role": "user", "content": f"That answer is not valid: {problem}. Answer again with "
                                                         "only the JSON object the schema describes."}]
            continue
        return _replace(verdict, prompt_sha256=prompt.sha256, context_cut=prompt.cut, model=config.model,
                        chain_hash=view.chain_hash, prompt_tokens=usage or prompt.tokens,
                        notes=(("answered after one repair",) if attempt else ()),
                        elapsed_ms=(time.perf_counter() - started) * 1000)
    return failed(f"the judge's answer did not validate twice (once after a repair request): {problem}", raw)


def _complete(config: JudgeConfig, messages: list[dict[str, str]]) -> tuple[str, int]:
    """One chat completion: its text and the prompt tokens the endpoint counted (0 if it did not say)."""
    body = {"model": config.model, "messages": messages, "temperature": config.temperature,
            "max_tokens": config.answer_tokens, "response_format": RESPONSE_FORMAT}
    headers = {"Content-Type": "application/json"}
    if config.api_key:
        headers["Authorization"] = f"Bearer {config.api_key}"
    request = urllib.request.Request(f"{config.base_url}/chat/completions", data=json.dumps(body).encode(),
                                     headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=config.timeout_s) as response:
            doc = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise _Unreachable(f"HTTP {exc.code}: {_body(exc)}") from exc
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        raise _Unreachable(str(getattr(exc, "reason", exc)) or type(exc).__name__) from exc
    except ValueError as exc:
        raise _Unreachable(f"not JSON: {exc}") from exc
    try:
        text = doc["choices"][0]["message"]["content"] or ""
    except (KeyError, IndexError, TypeError) as exc:
        raise _Unreachable(f"not a chat completion: {str(doc)[:200]}") from exc
    usage = doc.get("usage") or {}
    return str(text), int(usage.get("prompt_tokens") or 0) if isinstance(usage, dict) else 0


def _body(exc: urllib.error.HTTPError) -> str:
    try:
        return exc.read().decode("utf-8", "replace")[:300]
    except OSError:
        return str(exc.reason)


def json_answer(raw: str) -> dict[str, Any]:
    """The judge's JSON object, also when wrapped in a code fence or prose; :class:`_Invalid` if none."""
    text = raw.strip()
    fenced = re.search(r"```(?:json)?\s*(.*?)```", text, re.DOTALL)
    if fenced:
        text = fenced.group(1).strip()
    if not text.startswith("{") and "{" in text:
        text = text[text.index("{"): text.rindex("}") + 1]
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise _Invalid(f"it is not JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise _Invalid("it is not a JSON object")
    return doc


def _verdict(view: RunView, prompt: Prompt, doc: dict[str, Any]) -> Verdict:
    """Validate the answer against the schema and the run (steps that exist) and make it a verdict."""
    steps = {s.step: s for s in view.steps}
    outcome = doc.get("verdict")
    if outcome not in VERDICTS:
        raise _Invalid(f'"verdict" must be one of {", ".join(VERDICTS)}, not {outcome!r}')
    raw_modes = doc.get("modes")
    if not isinstance(raw_modes, list):
        raise _Invalid('"modes" must be a list')
    hits = []
    for item in raw_modes:
        if not isinstance(item, dict) or item.get("mode") not in BY_ID:
            raise _Invalid(f"each mode must be an object whose mode is a MAST id (FM-1.1 ... FM-3.3), not {item!r}")
        step = _step(item.get("step"), steps, "a mode's step")
        culprit = Culprit(step=step, span_id=steps[step].span_id, name=steps[step].span_name) if step is not None \
            else None
        evidence = str(item.get("evidence") or "")
        hits.append(ModeHit(mode=item["mode"], detector=LLM, explanation=evidence, culprit=culprit,
                            evidence=(Evidence(step=step, span_id=culprit.span_id if culprit else "",
                                               path="transcript", value=evidence, note="the judge quotes"),)))
    if outcome == "ok" and hits:
        raise _Invalid('an "ok" verdict names no mode')
    culprit_step = _step(doc.get("culprit_step"), steps, '"culprit_step"')
    main = primary(hits)
    culprit = (Culprit(step=culprit_step, span_id=steps[culprit_step].span_id, name=steps[culprit_step].span_name)
               if culprit_step is not None else main.culprit if main else None)
    root_cause = doc.get("root_cause")
    if not isinstance(root_cause, str):
        raise _Invalid('"root_cause" must be a string')
    notes: tuple[str, ...] = ()
    fix = _fix(doc.get("fix"), steps)
    if doc.get("fix") is not None and fix is None:
        notes = ("the judge's fix was dropped: it does not fork at an LLM step with a prompt or a message",)
    return Verdict(run_id=view.run_id, outcome=Outcome(outcome), classifier=LLM, modes=tuple(hits), culprit=culprit,
                   root_cause=root_cause, fix=fix, notes=notes)


def _step(value: Any, steps: dict[int, Any], what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value not in steps:
        raise _Invalid(f"{what} must be a step of the transcript (#0 to #{max(steps, default=0)}) or null, "
                       f"not {value!r}")
    return value


def _fix(value: Any, steps: dict[int, Any]) -> Fix | None:
    if not isinstance(value, dict):
        return None
    at = value.get("at")
    system, message = value.get("system"), value.get("message")
    if not isinstance(at, int) or at not in steps or not steps[at].is_llm:
        return None
    if not (isinstance(system, str) and system) and not (isinstance(message, str) and message):
        return None
    return Fix(at=at, system=system if isinstance(system, str) and system else None,
               message=message if isinstance(message, str) and message else None)


def _replace(verdict: Verdict, **changes: Any) -> Verdict:
    return replace(verdict, **changes)
