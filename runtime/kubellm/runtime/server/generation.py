"""From validated prompts to admitted engine requests, and the two ways of waiting for
the results: collect them whole while watching for a disconnect, or stream them.

A completions request may hold several prompts: each becomes its own engine request
(``<id>-<i>``), all checked before the first is admitted and all aborted together.
"""
from __future__ import annotations

import asyncio

from starlette.requests import Request

from kubellm.runtime.core.outputs import RequestOutput
from kubellm.runtime.core.sampling_params import ParameterError, SamplingParams
from kubellm.runtime.engine.llm_engine import PromptTooLongError, TokenizedPrompt
from kubellm.runtime.server.async_engine import RequestStream
from kubellm.runtime.server.errors import APIError, bad_request
from kubellm.runtime.server.prompts import Prompt
from kubellm.runtime.server.state import ServerState


class ClientDisconnected(Exception):
    """The client went away before its (non-streaming) response was ready."""


def check_model(state: ServerState, model: str | None) -> None:
    if model is not None and model != state.model_name:
        raise APIError(404, f"model '{model}' does not exist; this server serves "
                            f"'{state.model_name}'", param="model", code="model_not_found")


async def admit(state: ServerState, request_id: str, prompts: list[Prompt],
                params: SamplingParams, priority: int) -> "MultiStream":
    """Admit one engine request per prompt; if any is refused, abort those admitted."""
    if params.structured_outputs is not None:
        await _compile_ahead(state, params)
    streams: list[RequestStream] = []
    try:
        for i, prompt in enumerate(prompts):
            engine_id = request_id if len(prompts) == 1 else f"{request_id}-{i}"
            engine_prompt = TokenizedPrompt(prompt.text, prompt.token_ids) \
                if prompt.text is not None else prompt.token_ids
            streams.append(await _admit_one(state, engine_id, engine_prompt, params,
                                            priority, prompt.param))
    except BaseException:
        for stream in streams:
            stream.close()
        raise
    return MultiStream(streams)


async def _compile_ahead(state: ServerState, params: SamplingParams) -> None:
    """Compile the request's grammar on a worker thread (xgrammar releases the GIL), so
    that the engine's own compile is a hit in xgrammar's cache and its step loop never
    waits for a new schema; a spec that does not compile is a 400 before admission."""
    grammar = getattr(getattr(state.async_engine, "engine", None), "grammar", None)
    if grammar is None:
        return
    try:
        await asyncio.to_thread(lambda: grammar.get().compile(params.structured_outputs))
    except ParameterError as exc:
        raise bad_request(str(exc), param=exc.param) from None


async def _admit_one(state, request_id, prompt, params, priority, prompt_param):
    try:
        return await state.async_engine.add_request(request_id, prompt, params, priority)
    except PromptTooLongError as exc:
        raise bad_request(str(exc), param=prompt_param,
                          code="context_length_exceeded") from None
    except ParameterError as exc:
        raise bad_request(str(exc), param=exc.param) from None
    except ValueError as exc:
        raise bad_request(str(exc)) from None


class MultiStream:
    """The outputs of one HTTP request's engine requests as ``(prompt index, output)``,
    in the order they arrive. ``close()`` aborts whatever is unfinished."""

    def __init__(self, streams: list[RequestStream]):
        self.streams = streams

    def __aiter__(self):
        if len(self.streams) == 1:
            return self._single()
        return self._merged()

    async def _single(self):
        async for out in self.streams[0]:
            yield 0, out

    async def _merged(self):
        queue: asyncio.Queue = asyncio.Queue()
        done = object()

        async def pump(index: int, stream: RequestStream):
            try:
                async for out in stream:
                    queue.put_nowait((index, out))
                queue.put_nowait((index, done))
            except BaseException as exc:  # an engine failure reaches the consumer
                queue.put_nowait((index, exc))

        tasks = [asyncio.ensure_future(pump(i, s)) for i, s in enumerate(self.streams)]
        remaining = len(tasks)
        try:
            while remaining:
                index, item = await queue.get()
                if item is done:
                    remaining -= 1
                elif isinstance(item, BaseException):
                    raise item
                else:
                    yield index, item
        finally:
            for task in tasks:
                task.cancel()

    def close(self) -> None:
        for stream in self.streams:
            stream.close()


async def collect(stream: MultiStream, request: Request) -> list[RequestOutput]:
    """Each prompt's final output, or ClientDisconnected (after aborting) if the client
    leaves first."""
    async def last_outputs():
        last: list[RequestOutput | None] = [None] * len(stream.streams)
        async for index, out in stream:
            last[index] = out
        return last

    result = asyncio.ensure_future(last_outputs())
    gone = asyncio.ensure_future(_wait_disconnect(request))
    try:
        await asyncio.wait({result, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (result, gone):
            if not task.done():
                task.cancel()
        stream.close()
    if not result.done() or result.cancelled():
        raise ClientDisconnected()
    return result.result()


async def _wait_disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
