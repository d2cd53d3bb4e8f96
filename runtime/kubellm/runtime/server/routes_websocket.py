"""WebSocket /v1/ws/completions: one socket, any number of completions in turn.

The client sends a completions request body (JSON, the same fields as POST
/v1/completions; ``stream`` is implied). The server answers with one message per new
piece of text, ``{"index", "text", "finish_reason"}``, then ``{"done": true, "usage"}``.
A bad request gets ``{"error": {...}}`` and the socket stays open for the next one.
Closing the socket mid-generation aborts the request.
"""
from __future__ import annotations

from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from kubellm.runtime.server import generation, responses
from kubellm.runtime.server.async_engine import EngineStepError
from kubellm.runtime.server.errors import APIError
from kubellm.runtime.server.prompts import check_length, completion_prompts
from kubellm.runtime.server.protocol import parse_body
from kubellm.runtime.server.protocol_completions import CompletionRequest
from kubellm.runtime.server.responses import ChoiceCursor

router = APIRouter()


@router.websocket("/v1/ws/completions")
async def ws_completions(websocket: WebSocket):
    await websocket.accept()
    state = websocket.app.state.kubellm
    try:
        while True:
            raw = await websocket.receive_text()
            try:
                await _serve_one(websocket, state, raw)
            except APIError as exc:
                await websocket.send_json(exc.body())
    except WebSocketDisconnect:
        return


async def _serve_one(websocket: WebSocket, state, raw: str) -> None:
    body = parse_body(raw.encode(), CompletionRequest)
    generation.check_model(state, body.model)
    params = body.to_sampling_params(state.generation_defaults, state.max_logprobs)
    prompts = completion_prompts(state, body.prompts(), body.truncate_prompt_tokens)
    for prompt in prompts:
        check_length(state, prompt, params)
    request_id = responses.new_id("cmpl")
    stream = await generation.admit(state, request_id, prompts, params, body.priority)
    cursors: dict[int, ChoiceCursor] = {}
    last = [None] * len(prompts)
    try:
        async for i, out in stream:
            last[i] = out
            for comp in out.outputs:
                index = i * params.n + comp.index
                step = cursors.setdefault(index, ChoiceCursor(index)).advance(comp)
                if step is not None:
                    await websocket.send_json({"index": index, "text": step[0],
                                               "finish_reason": step[3]})
    except EngineStepError as exc:
        raise APIError(500, str(exc)) from None
    finally:
        stream.close()
    outs = [o for o in last if o is not None]
    await websocket.send_json({"done": True, "id": request_id,
                               "usage": responses.usage(outs) if outs else None})
