"""What a request body must be before anyone reads it: no larger than
``--max-request-body-bytes`` (413, before reading when Content-Length says so, else as soon
as the count passes it), and JSON on the generation and tokenizer routes (415 otherwise, as vLLM
answers: a browser page may post text/plain cross-origin without a preflight, JSON it may
not)."""
from __future__ import annotations

from starlette.responses import JSONResponse

from kubellm.runtime.server.errors import APIError

JSON_PATHS = ("/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize")
_BODY_METHODS = ("POST", "PUT", "PATCH")


class BodyLimitMiddleware:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] not in _BODY_METHODS:
            return await self.app(scope, receive, send)
        limit = scope["app"].state.kubellm.config.max_request_body_bytes
        headers = dict(scope["headers"])
        if scope["path"] in JSON_PATHS and not _is_json(headers.get(b"content-type")):
            return await _reply(scope, receive, send, APIError(
                415, "Content-Type must be application/json", code="unsupported_media_type"))
        length = headers.get(b"content-length", b"")
        if length.isdigit() and int(length) > limit:
            return await _reply(scope, receive, send, too_large(limit))
        received = 0

        async def counted_receive():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise too_large(limit)  # the route's error handler answers 413
            return message
        await self.app(scope, counted_receive, send)


def too_large(limit: int) -> APIError:
    # the unread rest of the body cannot be skipped cheaply: this connection ends here
    return APIError(413, f"request body is larger than {limit} bytes "
                         "(--max-request-body-bytes)", code="request_too_large",
                    headers={"Connection": "close"})


def _is_json(content_type: bytes | None) -> bool:
    if not content_type:
        return False
    return content_type.split(b";")[0].strip().lower() == b"application/json"


async def _reply(scope, receive, send, error: APIError) -> None:
    await JSONResponse(error.body(), error.status, headers=error.headers)(scope, receive, send)
