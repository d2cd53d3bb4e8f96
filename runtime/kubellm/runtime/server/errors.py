"""Errors in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``.

Handlers raise APIError; the app's exception handlers turn it (and FastAPI's own 404/405,
and anything unexpected) into that JSON body so that every client library parses it.
"""
from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

logger = logging.getLogger("kubellm.server")

# OpenAI's "type" per status; clients branch on status, humans read type and message.
_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
          405: "invalid_request_error", 413: "invalid_request_error",
          415: "invalid_request_error",
          503: "service_unavailable", 500: "internal_server_error"}


class APIError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None,
                 code: str | None = None, type: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type or _TYPES.get(status, "invalid_request_error")
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def bad_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, param=param, code=code)


def unavailable(message: str, retry_after_s: int = 1) -> APIError:
    return APIError(503, message, code="service_unavailable",
                    headers={"Retry-After": str(retry_after_s)})


def from_engine_error(exc: BaseException) -> APIError:
    """What a client is told when its request's stream ends in an error: 503 (retry
    elsewhere) when the engine is gone or the server is shutting down, 400 for a request
    the engine refused as invalid, 500 when the engine itself failed."""
    from kubellm.runtime.engine_core.streams import EngineDeadError, RequestRejected
    if isinstance(exc, EngineDeadError):
        return unavailable(f"{exc}; retry the request")
    if isinstance(exc, RequestRejected) and exc.kind in ("param", "value"):
        return APIError(400, str(exc), param=exc.param)
    return APIError(500, str(exc))


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(_request: Request, exc: APIError):
        return exc.response()

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, exc: StarletteHTTPException):
        return APIError(exc.status_code, str(exc.detail), headers=exc.headers).response()

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, exc: Exception):
        logger.exception("unhandled error in request handler")
        return APIError(500, f"internal error: {type(exc).__name__}").response()
