"""Server-sent events for streamed completions: one ``data: {json}`` event per chunk,
``data: [DONE]`` at the end; if the engine fails or the server shuts down mid-stream, an
OpenAI-shaped error event, then ``[DONE]``."""
from __future__ import annotations

from typing import AsyncIterator, Callable

from starlette.responses import StreamingResponse

from kubellm.runtime.core.outputs import RequestOutput
from kubellm.runtime.server.errors import from_engine_error
from kubellm.runtime.server.fast_json import dumps


SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class EngineStreamResponse(StreamingResponse):
    """An SSE response that aborts its engine request however the response ends: a
    client gone before the first chunk cancels the response before the chunk generator
    ever runs, so the generator's own ``finally`` cannot be relied on alone."""

    def __init__(self, chunks: AsyncIterator[bytes], stream):
        super().__init__(chunks, media_type="text/event-stream", headers=SSE_HEADERS)
        self.engine_stream = stream

    async def __call__(self, scope, receive, send):
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.engine_stream.close()


def sse(data: dict | str) -> bytes:
    payload = data.encode() if isinstance(data, str) else dumps(data)
    return b"data: " + payload + b"\n\n"


async def sse_events(stream, on_output: Callable[[int, RequestOutput], list[dict]],
                     first_chunks: list[dict] = (),
                     final_chunks: Callable[[], list[dict]] | None = None,
                     ) -> AsyncIterator[bytes]:
    """SSE bytes for one HTTP request's engine outputs; closing the iterator aborts them.

    ``stream`` yields (prompt index, cumulative output); ``on_output`` turns each into the
    chunks it adds; ``final_chunks()`` (the usage chunk) goes before [DONE].
    """
    try:
        for chunk in first_chunks:
            yield sse(chunk)
        async for index, out in stream:
            for chunk in on_output(index, out):
                yield sse(chunk)
        if final_chunks is not None:
            for chunk in final_chunks():
                yield sse(chunk)
        yield sse("[DONE]")
    except Exception as exc:
        # a status line was sent long ago: the error travels as the last event, with a
        # code a client can act on (service_unavailable: retry elsewhere), then [DONE]
        yield sse(from_engine_error(exc).body())
        yield sse("[DONE]")
    finally:
        stream.close()
