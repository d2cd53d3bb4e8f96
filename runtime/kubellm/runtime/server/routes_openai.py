"""POST /v1/completions and /v1/chat/completions, streamed (SSE) or not.

The handlers read the raw body and hand it to generation.start, which parses it off the
event loop; the OpenAPI document still describes each body (``openapi_extra``), so
clients and schema fuzzers know what to send.
"""
from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from kubellm.runtime.server import generation, responses
from kubellm.runtime.server.errors import from_engine_error
from kubellm.runtime.server.fast_json import JSONBytesResponse
from kubellm.runtime.server.protocol import ChatCompletionRequest, CompletionRequest
from kubellm.runtime.server.responses import LogprobFormatter
from kubellm.runtime.server.streaming import EngineStreamResponse, stream_choices

router = APIRouter()
CLIENT_CLOSED = 499  # nginx's code for "client closed request"; nobody reads it


def _documented_body(model_cls) -> dict:
    """The body's JSON schema as OpenAPI wants it: self-contained (pydantic's "$defs"
    references are inlined; none of our bodies is recursive)."""
    schema = model_cls.model_json_schema()
    defs = schema.pop("$defs", {})

    def inline(node):
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                return inline(defs[ref.rsplit("/", 1)[1]])
            return {k: inline(v) for k, v in node.items()}
        if isinstance(node, list):
            return [inline(v) for v in node]
        return node
    return {"requestBody": {"required": True, "content": {
        "application/json": {"schema": inline(schema)}}}}


@router.post("/v1/completions", openapi_extra=_documented_body(CompletionRequest))
async def completions(request: Request):
    prepared, stream, logprobs, model = await _start(request, CompletionRequest)
    body, request_id, params = prepared.body, prepared.request_id, prepared.params
    if not body.stream:
        return await _respond(stream, request, lambda out: responses.completion_response(
            request_id, model, out, logprobs))

    offsets = [0] * params.n  # characters sent per choice: completion logprobs' text_offset

    def chunk(comp, delta, finish_reason, start, end):
        lp = logprobs.completion(comp, start, end, offsets[comp.index]) if logprobs else None
        offsets[comp.index] += len(delta)
        return responses.completion_chunk(request_id, model, comp.index, delta, finish_reason,
                                          lp)

    final = ((lambda out: responses.usage_chunk(request_id, model, "text_completion", out))
             if body.include_usage else None)
    return EngineStreamResponse(stream_choices(stream, params.n, chunk, final_chunk=final),
                                stream)


@router.post("/v1/chat/completions", openapi_extra=_documented_body(ChatCompletionRequest))
async def chat_completions(request: Request):
    prepared, stream, logprobs, model = await _start(request, ChatCompletionRequest)
    body, request_id, params = prepared.body, prepared.request_id, prepared.params
    if not body.stream:
        return await _respond(stream, request, lambda out: responses.chat_response(
            request_id, model, out, logprobs))

    def chunk(comp, delta, finish_reason, start, end):
        lp = logprobs.chat(comp, start, end) if logprobs else None
        return responses.chat_chunk(request_id, model, comp.index,
                                    {"content": delta} if delta else {}, finish_reason, lp)

    # OpenAI opens every choice with the role, before any content.
    opening = [responses.chat_chunk(request_id, model, i, {"role": "assistant", "content": ""},
                                    None, None) for i in range(params.n)]
    final = ((lambda out: responses.usage_chunk(request_id, model, "chat.completion.chunk",
                                                out))
             if body.include_usage else None)
    return EngineStreamResponse(stream_choices(stream, params.n, chunk, first_chunks=opening,
                                               final_chunk=final), stream)


async def _start(request: Request, body_cls):
    """Parse and admit: (prepared request, engine stream, logprob formatter or None,
    served model name)."""
    state = request.app.state.kubellm
    prepared, stream = await generation.start(state, await request.body(), body_cls)
    logprobs = None if prepared.params.logprobs is None else \
        LogprobFormatter(state.tokenizer, prepared.params.logprobs)
    return prepared, stream, logprobs, state.model_name


async def _respond(stream, request: Request, make_body) -> Response:
    """The whole response at once; nothing (and an aborted request) if the client left."""
    try:
        out = await generation.collect(stream, request)
    except generation.ClientDisconnected:
        return Response(status_code=CLIENT_CLOSED)
    except Exception as exc:  # the engine's error, told as the status a client acts on
        raise from_engine_error(exc) from None
    return JSONBytesResponse(make_body(out))
