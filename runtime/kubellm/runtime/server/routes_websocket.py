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
from kubellm.runtime.server.errors import APIError, engine_error
from kubellm.runtime.server.protocol import CompletionRequest, parse_body
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
    request_id, params, stream = await generation.start(state, body)
    cursors = [ChoiceCursor(i) for i in range(params.n)]
    last = None
    try:
        async for out in stream:
            last = out
            for comp in out.outputs:
                step = cursors[comp.index].advance(comp)
                if step is not None:
                    await websocket.send_json({"index": comp.index, "text": step[0],
                                               "finish_reason": step[3]})
    except EngineStepError as exc:
        raise engine_error(exc) from None
    finally:
        stream.close()
    await websocket.send_json({"done": True, "id": request_id,
                               "usage": responses.usage(last) if last else None})
