"""POST /v1/completions and /v1/chat/completions, streamed (SSE) or not."""
from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from kubellm.runtime.server import generation, responses
from kubellm.runtime.server.async_engine import EngineStepError
from kubellm.runtime.server.errors import engine_error
from kubellm.runtime.server.protocol import (ChatCompletionRequest, CompletionRequest,
                                             parse_body)
from kubellm.runtime.server.responses import LogprobFormatter
from kubellm.runtime.server.streaming import EngineStreamResponse, stream_choices

router = APIRouter()
CLIENT_CLOSED = 499  # nginx's code for "client closed request"; nobody reads it


@router.post("/v1/completions")
async def completions(request: Request):
    body, request_id, params, stream, logprobs, model = await _start(request, CompletionRequest)
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


@router.post("/v1/chat/completions")
async def chat_completions(request: Request):
    body, request_id, params, stream, logprobs, model = await _start(request,
                                                                     ChatCompletionRequest)
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
    """Parse and admit: (body, request id, params, engine stream, logprob formatter or
    None, served model name)."""
    state = request.app.state.kubellm
    body = parse_body(await request.body(), body_cls)
    request_id, params, stream = await generation.start(state, body)
    logprobs = None if params.logprobs is None else \
        LogprobFormatter(state.tokenizer, params.logprobs)
    return body, request_id, params, stream, logprobs, state.model_name


async def _respond(stream, request: Request, make_body) -> Response:
    """The whole response at once; nothing (and an aborted request) if the client left."""
    try:
        out = await generation.collect(stream, request)
    except generation.ClientDisconnected:
        return Response(status_code=CLIENT_CLOSED)
    except EngineStepError as exc:
        raise engine_error(exc) from None
    return JSONResponse(make_body(out))
