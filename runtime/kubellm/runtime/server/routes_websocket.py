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
from kubellm.runtime.server.errors import APIError, from_engine_error
from kubellm.runtime.server.protocol_completions import CompletionRequest
from kubellm.runtime.server.responses import ChoiceCursor

router = APIRouter()


@router.websocket("/v1/ws/completions")
async def ws_completions(websocket: WebSocket):
    await websocket.accept()
    state = websocket.app.state.kubellm
    try:
        while True:
            raw = await _receive_raw(websocket)
            try:
                await _serve_one(websocket, state, raw)
            except APIError as exc:
                await websocket.send_json(exc.body())
    except WebSocketDisconnect:
        return


async def _receive_raw(websocket: WebSocket) -> bytes:
    message = await websocket.receive()
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(message.get("code", 1000))
    if message.get("bytes") is not None:
        return message["bytes"]
    return (message.get("text") or "").encode()


async def _serve_one(websocket: WebSocket, state, raw: bytes) -> None:
    if len(raw) > state.config.max_request_body_bytes:
        raise APIError(413, f"message is larger than {state.config.max_request_body_bytes} "
                            "bytes (--max-request-body-bytes)", code="request_too_large")
    prepared, stream = await generation.start(state, raw, CompletionRequest)
    request_id, params = prepared.request_id, prepared.params
    cursors: dict[int, ChoiceCursor] = {}
    last = [None] * len(prepared.prompts)
    try:
        async for i, out in stream:
            last[i] = out
            for comp in out.outputs:
                index = i * params.n + comp.index
                step = cursors.setdefault(index, ChoiceCursor(index)).advance(comp)
                if step is not None:
                    await websocket.send_json({"index": index, "text": step[0],
                                               "finish_reason": step[3]})
    except Exception as exc:
        raise from_engine_error(exc) from None
    finally:
        stream.close()
    outs = [o for o in last if o is not None]
    await websocket.send_json({"done": True, "id": request_id,
                               "usage": responses.usage(outs) if outs else None})
