"""The wrapper of botocore's ``BaseClient._make_api_call`` for Bedrock Runtime's Converse calls.

botocore sends through its own HTTP stack (urllib3), which the transport does not see, so the
exchange is recorded and answered here, around the client method, the way the transport does
for the other clients: the call's parameters are its request body (matched and fingerprinted by
a replay), botocore's parsed response its response, a ConverseStream's events its events. In a
replay a recorded answer is handed back in botocore's own shapes (a dict with its
``ResponseMetadata``, a ``stream`` of event dicts, a ``ClientError`` for a recorded failure) and
nothing is sent. A fork's fix, written in the chat shape (a system message, ``temperature``,
``model``), is put where Converse keeps each before the call goes out.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from agentreplay_otel import intercept, semconv, settings
from agentreplay_otel.errors import ReplayError
from agentreplay_otel.instrumentation import _transport
from agentreplay_otel.instrumentation._capture import DROPPED_HEADERS
from agentreplay_otel.instrumentation._llm import LLMCall
from agentreplay_otel.instrumentation._stream import SyncStreamProxy
from agentreplay_otel.instrumentation._wrap import CallScope, Endpoint, Recorder
from agentreplay_otel.instrumentation.bedrock import _extract
from agentreplay_otel.recording import RecordedStep

SERVICE = "bedrock-runtime"
_STREAMED = {"Converse": False, "ConverseStream": True}  # the operations recorded: streamed or not


def _endpoint(*, stream: bool) -> Endpoint:
    return Endpoint(
        provider=semconv.PROVIDER_AWS_BEDROCK,
        request=_extract.converse_stream_request if stream else _extract.converse_request,
        result=_extract.converse_result,
        accumulator=_extract.ConverseStreamAccumulator,
    )


def _service(client: Any) -> str | None:
    try:
        return client.meta.service_model.service_name  # type: ignore[no-any-return]
    except AttributeError:
        return None


def make_api_call(recorder: Recorder) -> Callable[..., Any]:
    endpoints = {False: _endpoint(stream=False), True: _endpoint(stream=True)}

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        operation = args[0] if args else kwargs.get("operation_name")
        params = args[1] if len(args) > 1 else kwargs.get("api_params")
        stream = _STREAMED.get(operation) if isinstance(operation, str) else None
        if stream is None or not isinstance(operation, str) or not isinstance(params, dict) \
                or _service(instance) != SERVICE:
            return wrapped(*args, **kwargs)
        endpoint = endpoints[stream]
        scope = CallScope(endpoint, recorder, instance, {**params, "model": params.get("modelId")})
        call = scope.call
        if call is None:
            return wrapped(*args, **kwargs)
        with scope:
            response = _exchange(call, instance, operation, params, stream, lambda body: wrapped(operation, body))
        if stream:
            events: list[str] = []
            if settings.current().capture_content:
                call.exchange.events = events
            response["stream"] = SyncStreamProxy(response["stream"], call, _extract.ConverseStreamAccumulator(events))
        else:
            call.finish(_extract.converse_result(response))
        return response

    return wrapper


def _exchange(call: LLMCall, client: Any, operation: str, params: dict[str, Any], stream: bool,
              send: Callable[[dict[str, Any]], Any]) -> Any:
    """The response: sent (perhaps with a fork's fix), or the recorded one; refused in a replay."""
    interceptor = intercept.current()
    call.exchange.request = params
    if not getattr(interceptor, "reads_request_body", True) and interceptor.acts:
        return _sent(call, send, params, stream)
    answer = interceptor.on_request(call.provider, call.name, params, call.step)
    call.charged = answer.live
    refusal = answer.error
    if refusal is None and answer.route is not None:
        refusal = ReplayError("a fork cannot route a Bedrock call to another provider or endpoint; "
                              "fork it with a Bedrock model id")
    if refusal is not None:
        call.refusal = refusal
        raise refusal
    if not interceptor.acts:
        call.span.set_attribute(semconv.REPLAY_SOURCE, "live" if answer.live else "recorded")
    if answer.recorded is not None:
        return _recorded(call, client, answer.recorded, operation, stream)
    body = params
    if answer.body is not None and answer.body != params:
        body = converse_body(answer.body)
        call.exchange.request = body
    with _transport._live(call, False):  # noqa: SLF001 - the connection is the model's (a fork's live step)
        return _sent(call, send, body, stream)


def _sent(call: LLMCall, send: Callable[[dict[str, Any]], Any], body: dict[str, Any], stream: bool) -> Any:
    from botocore.exceptions import ClientError  # type: ignore[import-untyped]

    try:
        response = send(body)
    except ClientError as exc:  # recorded with its error body: a replay raises it again
        _keep(call, exc.response, stream=False)
        raise
    _keep(call, response, stream)
    return response


def _keep(call: LLMCall, response: Mapping[str, Any], stream: bool) -> None:
    metadata = response.get("ResponseMetadata") or {}
    call.exchange.status = int(metadata.get("HTTPStatusCode", 200))
    call.exchange.headers = {str(k).lower(): str(v) for k, v in (metadata.get("HTTPHeaders") or {}).items()
                             if str(k).lower() not in DROPPED_HEADERS}
    if not stream and settings.current().capture_content:
        body = {k: v for k, v in response.items() if k != "ResponseMetadata"}
        call.exchange.body = json.dumps(body, separators=(",", ":"), default=str)


def _recorded(call: LLMCall, client: Any, step: RecordedStep, operation: str, stream: bool) -> Any:
    """The recorded answer in botocore's shapes; a recorded failure as the client's own exception
    class for its code (``client.exceptions.ValidationException``), as botocore raises it."""
    status = int((step.http or {}).get("status", 200))
    headers = {str(k): str(v) for k, v in dict((step.http or {}).get("headers", {})).items()}
    call.exchange.status, call.exchange.headers = status, headers
    metadata = {"RequestId": headers.get("x-amzn-requestid", ""), "HTTPStatusCode": status,
                "HTTPHeaders": headers, "RetryAttempts": 0}
    if status >= 400 or (not stream and step.response is None and step.stream is None):
        from botocore.exceptions import ClientError  # type: ignore[import-untyped]

        call.exchange.body = step.response
        error = json.loads(step.response or "{}")
        try:
            kind = client.exceptions.from_code((error.get("Error") or {}).get("Code", ""))
        except Exception:  # noqa: BLE001 - a client without its exceptions: the base class
            kind = ClientError
        raise kind({**error, "ResponseMetadata": metadata}, operation)
    if stream:
        events = [json.loads(e) if isinstance(e, str) else e for e in step.stream or []]
        return {"ResponseMetadata": metadata, "stream": RecordedEventStream(events)}
    call.exchange.body = step.response
    return {**json.loads(step.response or "{}"), "ResponseMetadata": metadata}


class RecordedEventStream:
    """A ConverseStream's recorded events, read as botocore's ``EventStream`` is read."""

    def __init__(self, events: list[Any]) -> None:
        self._events = events

    def __iter__(self) -> Iterator[Any]:
        yield from self._events

    def close(self) -> None:
        self._events = []


def converse_body(body: Mapping[str, Any]) -> dict[str, Any]:
    """A fork's fixed parameters where Converse keeps them: a system message in ``system``,
    ``temperature`` in ``inferenceConfig``, ``model`` as ``modelId``, an added message's text
    as a content block."""
    out = dict(body)
    model = out.pop("model", None)
    if model:
        out["modelId"] = model
    temperature = out.pop("temperature", None)
    if temperature is not None:
        out["inferenceConfig"] = {**(out.get("inferenceConfig") or {}), "temperature": temperature}
    messages = out.get("messages")
    if not isinstance(messages, list):
        return out
    system, kept = [], []
    for message in messages:
        text = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(message, Mapping) and message.get("role") in ("system", "developer"):
            system.append({"text": text} if isinstance(text, str) else text)
        elif isinstance(text, str):
            kept.append({**message, "content": [{"text": text}]})
        else:
            kept.append(message)
    out["messages"] = kept
    if system:
        out["system"] = system
    return out
