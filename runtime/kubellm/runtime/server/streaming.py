"""Server-sent events for streamed completions: one ``data: {json}`` event per chunk,
``data: [DONE]`` at the end; if the engine fails or the server shuts down mid-stream, an
OpenAI-shaped error event, then ``[DONE]``."""
from __future__ import annotations

from typing import AsyncIterator, Callable

from starlette.responses import StreamingResponse

from kubellm.runtime.core.outputs import CompletionOutput, RequestOutput
from kubellm.runtime.engine_core.streams import RequestStream
from kubellm.runtime.server.errors import from_engine_error
from kubellm.runtime.server.fast_json import dumps
from kubellm.runtime.server.responses import ChoiceCursor


SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class EngineStreamResponse(StreamingResponse):
    """An SSE response that aborts its engine request however the response ends: a
    client gone before the first chunk cancels the response before the chunk generator
    ever runs, so the generator's own ``finally`` cannot be relied on alone."""

    def __init__(self, chunks: AsyncIterator[bytes], stream: RequestStream):
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


async def stream_choices(stream: RequestStream, n: int,
                         make_chunk: Callable[[CompletionOutput, str, str | None, int, int], dict],
                         first_chunks: list[dict] = (),
                         final_chunk: Callable[[RequestOutput], dict] | None = None,
                         ) -> AsyncIterator[bytes]:
    """SSE bytes for one request's n choices; closing the iterator aborts the request.

    ``make_chunk(choice, delta_text, finish_reason, first_token, end_token)`` builds one
    choice's chunk (the token range is what its logprobs cover); ``final_chunk(last_output)`` (the usage chunk) goes before [DONE].
    """
    cursors = [ChoiceCursor(i) for i in range(n)]
    last = None
    try:
        for chunk in first_chunks:
            yield sse(chunk)
        async for out in stream:
            last = out
            for comp in out.outputs:
                step = cursors[comp.index].advance(comp)
                if step is not None:
                    delta, start, end, finish_reason = step
                    yield sse(make_chunk(comp, delta, finish_reason, start, end))
        if final_chunk is not None and last is not None:
            yield sse(final_chunk(last))
        yield sse("[DONE]")
    except Exception as exc:
        # a status line was sent long ago: the error travels as the last event, with a
        # code a client can act on (service_unavailable: retry elsewhere), then [DONE]
        yield sse(from_engine_error(exc).body())
        yield sse("[DONE]")
    finally:
        stream.close()
