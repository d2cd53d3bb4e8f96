"""The gate in front of /v1/*: API key (401), draining (503), queue bound (503), and the
count of requests in flight that a drain waits for. A pure ASGI middleware, so that a
streamed response counts as in flight until its last byte is sent."""
from __future__ import annotations

import secrets

from starlette.responses import JSONResponse
from starlette.websockets import WebSocketClose

from kubellm.runtime.server.errors import APIError, unavailable

GENERATE_PATHS = ("/v1/completions", "/v1/chat/completions", "/v1/ws/completions")
WS_POLICY_VIOLATION, WS_TRY_AGAIN_LATER = 1008, 1013


class AdmissionMiddleware:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket") or not scope["path"].startswith("/v1/"):
            return await self.app(scope, receive, send)
        state = scope["app"].state.kubellm
        error = self._refusal(scope, state)
        if error is not None:
            if scope["type"] == "websocket":
                code = WS_POLICY_VIOLATION if error.status == 401 else WS_TRY_AGAIN_LATER
                return await WebSocketClose(code, error.message)(scope, receive, send)
            return await JSONResponse(error.body(), error.status,
                                      headers=error.headers)(scope, receive, send)
        state.num_in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            state.num_in_flight -= 1

    @staticmethod
    def _refusal(scope, state) -> APIError | None:
        key = state.config.api_key
        if key is not None:
            given = _bearer_token(scope)
            if given is None or not secrets.compare_digest(given.encode(), key.encode()):
                return APIError(401, "missing or invalid API key (send 'Authorization: "
                                     "Bearer <key>')", code="invalid_api_key")
        if state.is_draining:
            return unavailable("server is shutting down; retry on another replica")
        if not state.engine_client.is_alive:  # the engine core died (the server exits 1)
            return unavailable("the engine is not running; retry on another replica")
        if scope["path"] in GENERATE_PATHS and \
                state.engine_client.num_waiting >= state.config.max_queue:
            return unavailable(f"too many requests waiting (max_queue="
                               f"{state.config.max_queue}); retry later")
        return None


def _bearer_token(scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" else None
    return None
