"""POST /v1/completions and /v1/chat/completions, streamed (SSE) or not.

The handlers read the raw body and hand it to generation.start, which parses it off the
event loop; the OpenAPI document still describes each body (``openapi_extra``), so
clients and schema fuzzers know what to send.
"""
from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from kubellm.runtime.server import generation
from kubellm.runtime.server.chat_completions import ChatResponder
from kubellm.runtime.server.completions import CompletionResponder
from kubellm.runtime.server.errors import from_engine_error
from kubellm.runtime.server.fast_json import JSONBytesResponse
from kubellm.runtime.server.protocol_chat import ChatCompletionRequest
from kubellm.runtime.server.protocol_completions import CompletionRequest
from kubellm.runtime.server.streaming import EngineStreamResponse, sse_events

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
    state = request.app.state.kubellm
    prepared, stream = await generation.start(state, await request.body(), CompletionRequest)
    body = prepared.body
    responder = CompletionResponder(state.tokenizer, body, prepared.request_id,
                                    state.model_name, prepared.params, prepared.prompts)
    if not body.stream:
        return await _respond(stream, request, responder.response)
    return EngineStreamResponse(sse_events(stream, responder.chunks,
                                           final_chunks=responder.final_chunks), stream)


@router.post("/v1/chat/completions", openapi_extra=_documented_body(ChatCompletionRequest))
async def chat_completions(request: Request):
    state = request.app.state.kubellm
    prepared, stream = await generation.start(state, await request.body(),
                                              ChatCompletionRequest)
    body = prepared.body
    responder = ChatResponder(state.tokenizer, body, prepared.request_id, state.model_name,
                              prepared.params.n, prepared.prompts[0], prepared.tool_mode,
                              prepared.tool_parser)
    if not body.stream:
        return await _respond(stream, request, lambda outs: responder.response(outs[0]))
    return EngineStreamResponse(sse_events(stream, responder.chunks,
                                           first_chunks=responder.first_chunks(),
                                           final_chunks=responder.final_chunks), stream)


async def _respond(stream, request: Request, make_body) -> Response:
    """The whole response at once; nothing (and an aborted request) if the client left."""
    try:
        outs = await generation.collect(stream, request)
    except generation.ClientDisconnected:
        return Response(status_code=CLIENT_CLOSED)
    except Exception as exc:  # the engine's error, told as the status a client acts on
        raise from_engine_error(exc) from None
    return JSONBytesResponse(make_body(outs))
