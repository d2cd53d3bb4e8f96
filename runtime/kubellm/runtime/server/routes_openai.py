"""POST /v1/completions and /v1/chat/completions, streamed (SSE) or not."""
from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from kubellm.runtime.server import generation
from kubellm.runtime.server.async_engine import EngineStepError
from kubellm.runtime.server.chat_completions import ChatResponder
from kubellm.runtime.server.completions import CompletionResponder
from kubellm.runtime.server.errors import APIError, bad_request
from kubellm.runtime.server.prompts import chat_prompt, check_length, completion_prompts
from kubellm.runtime.server.protocol import parse_body
from kubellm.runtime.server.protocol_chat import ChatCompletionRequest
from kubellm.runtime.server.protocol_completions import CompletionRequest
from kubellm.runtime.server.responses import new_id
from kubellm.runtime.server.streaming import EngineStreamResponse, sse_events
from kubellm.runtime.server.structured_request import structured_outputs
from kubellm.runtime.server.tool_choice import auto_tool_parser, forced_structured_outputs

router = APIRouter()
CLIENT_CLOSED = 499  # nginx's code for "client closed request"; nobody reads it


@router.post("/v1/completions")
async def completions(request: Request):
    state = request.app.state.kubellm
    body = parse_body(await request.body(), CompletionRequest)
    generation.check_model(state, body.model)
    params = body.to_sampling_params(state.generation_defaults, state.max_logprobs)
    prompts = completion_prompts(state, body.prompts(), body.truncate_prompt_tokens)
    for prompt in prompts:
        check_length(state, prompt, params)
    request_id = new_id("cmpl")
    stream = await generation.admit(state, request_id, prompts, params, body.priority)
    responder = CompletionResponder(state.tokenizer, body, request_id, state.model_name,
                                    params, prompts)
    if not body.stream:
        return await _respond(stream, request, responder.response)
    return EngineStreamResponse(sse_events(stream, responder.chunks,
                                           final_chunks=responder.final_chunks), stream)


@router.post("/v1/chat/completions")
async def chat_completions(request: Request):
    state = request.app.state.kubellm
    body = parse_body(await request.body(), ChatCompletionRequest)
    generation.check_model(state, body.model)
    mode = body.check_tools()
    template = body.chat_template or state.chat_template or \
        _template_text(state.tokenizer)
    parser = auto_tool_parser(body, state.config, template) if mode == "auto" else None
    extra = {}
    forced = forced_structured_outputs(body, mode)
    if forced is not None:
        if structured_outputs(body) is not None:
            raise bad_request(f"tool_choice {body.tool_choice!r} cannot be combined with "
                              "response_format or structured_outputs", param="tool_choice")
        extra["structured_outputs"] = forced
    if parser is not None and parser.markers_are_special(state.tokenizer):
        extra["skip_special_tokens"] = False   # or the tool-call markers vanish
    params = body.to_sampling_params(state.generation_defaults, state.max_logprobs, **extra)
    prompt = chat_prompt(state, body)
    check_length(state, prompt, params)
    request_id = new_id("chatcmpl")
    stream = await generation.admit(state, request_id, [prompt], params, body.priority)
    responder = ChatResponder(state.tokenizer, body, request_id, state.model_name, params.n,
                              prompt, mode, parser)
    if not body.stream:
        return await _respond(stream, request, lambda outs: responder.response(outs[0]))
    return EngineStreamResponse(sse_events(stream, responder.chunks,
                                           first_chunks=responder.first_chunks(),
                                           final_chunks=responder.final_chunks), stream)


def _template_text(tokenizer) -> str | None:
    template = getattr(tokenizer, "chat_template", None)
    return template if isinstance(template, str) else (str(template) if template else None)


async def _respond(stream, request: Request, make_body) -> Response:
    """The whole response at once; nothing (and an aborted request) if the client left."""
    try:
        outs = await generation.collect(stream, request)
    except generation.ClientDisconnected:
        return Response(status_code=CLIENT_CLOSED)
    except EngineStepError as exc:
        raise APIError(500, str(exc)) from None
    return JSONResponse(make_body(outs))
