"""From the bytes of a request to admitted engine requests, and the two ways of waiting
for their results (collect them whole while watching for a disconnect, or stream them).

Everything that can take time in proportion to the input — JSON parsing, validation, the
chat template (with tools), tokenization — runs in ``prepare`` on the front end's
preprocessing threads, never on the event loop: probes and streams keep answering while
a prompt at the size limit is tokenized (HF fast tokenizers release the GIL while they
encode). The one exception is a completions body of at most ``INLINE_PREPARE_MAX_BYTES``
whose prompt is token ids, which needs no tokenizer and is prepared on the loop.

A completions request may hold several prompts: each becomes its own engine request
(``<id>-<i>``), all checked before the first is sent, and ``admit`` waits until the
engine core has taken every one in (or refused one: all are then aborted and the client
gets the status the refusal calls for — 400 for a parameter the engine rejects, such as
a grammar that does not compile), so that a streamed response starts only once its
requests run.
"""
from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass

from starlette.requests import Request

from kubellm.runtime.core.outputs import RequestOutput
from kubellm.runtime.core.sampling_params import SamplingParams
from kubellm.runtime.engine_core.streams import RequestRejected, RequestStream
from kubellm.runtime.server.errors import APIError, bad_request, from_engine_error
from kubellm.runtime.server.prompts import (Prompt, chat_prompt, check_chars, check_length,
                                            completion_prompts)
from kubellm.runtime.server.protocol import parse_body
from kubellm.runtime.server.protocol_chat import ChatCompletionRequest
from kubellm.runtime.server.protocol_completions import CompletionRequest
from kubellm.runtime.server.responses import new_id
from kubellm.runtime.server.state import ServerState
from kubellm.runtime.server.structured_request import structured_outputs
from kubellm.runtime.server.tool_choice import auto_tool_parser, forced_structured_outputs

# A completions body this small whose prompt is token ids is prepared on the event loop:
# it needs no tokenizer and its prepare() (at most ~0.2 ms here at 8 KiB) costs less than
# the hop to a preprocessing thread and back, which under a burst also waits for the
# interpreter lock (H200, 64 requests at once: 4-6 ms between a body read and prepared).
# Text and chat bodies (a template and a tokenizer, ~2 ms at 8 KiB), and larger bodies,
# go to the threads. A text prompt that matches by accident costs that much on the loop.
INLINE_PREPARE_MAX_BYTES = 8192
_TOKEN_ID_PROMPT = re.compile(rb'"prompt"\s*:\s*\[\s*[-\d\[]')

__all__ = ["ClientDisconnected", "MultiStream", "Prepared", "admit", "check_chars",
           "check_model", "collect", "prepare", "start"]


class ClientDisconnected(Exception):
    """The client went away before its (non-streaming) response was ready."""


@dataclass
class Prepared:
    """A validated request, rendered and tokenized, ready for the engine."""
    body: CompletionRequest | ChatCompletionRequest
    request_id: str
    params: SamplingParams
    prompts: list[Prompt]
    tool_mode: str | None = None     # chat: none | auto | required | named
    tool_parser: object = None       # chat, tool_choice auto: reads calls from the text


def check_model(state: ServerState, model: str | None) -> None:
    if model is not None and model != state.model_name:
        raise APIError(404, f"model '{model}' does not exist; this server serves "
                            f"'{state.model_name}'", param="model", code="model_not_found")


def prepare(state: ServerState, raw: bytes, body_cls) -> Prepared:
    """Parse, validate, render and tokenize (on a preprocessing thread)."""
    body = parse_body(raw, body_cls)
    check_model(state, body.model)
    if isinstance(body, ChatCompletionRequest):
        return _prepare_chat(state, body)
    params = body.to_sampling_params(state.generation_defaults, state.max_logprobs)
    prompts = completion_prompts(state, body.prompts(), body.truncate_prompt_tokens)
    for prompt in prompts:
        check_length(state, prompt, params)
    return Prepared(body, new_id("cmpl"), params, prompts)


def _prepare_chat(state: ServerState, body: ChatCompletionRequest) -> Prepared:
    mode = body.check_tools()
    template = body.chat_template or state.chat_template or _template_text(state.tokenizer)
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
    return Prepared(body, new_id("chatcmpl"), params, [prompt], mode, parser)


def _template_text(tokenizer) -> str | None:
    template = getattr(tokenizer, "chat_template", None)
    return template if isinstance(template, str) else (str(template) if template else None)


async def start(state: ServerState, raw: bytes, body_cls) -> tuple[Prepared, "MultiStream"]:
    """Prepare (off the loop unless ``_prepare_inline``), then admit: (the prepared
    request, its streams)."""
    trace = getattr(state.engine_client, "trace", None)   # benchmarks only
    received = time.monotonic()
    state.num_preprocessing += 1
    if state.num_preprocessing == 1 and hasattr(state.engine_client, "preparing"):
        state.engine_client.preparing(1)   # the first of a burst: the core waits for it
    try:
        if _prepare_inline(raw, body_cls):
            # one turn of the loop first: the handlers of bodies read with this one start
            # and count themselves in, so that the core hears of them with this request
            await asyncio.sleep(0)
            prepared = prepare(state, raw, body_cls)
        else:
            prepared = await asyncio.get_running_loop().run_in_executor(
                state.preprocess_pool, prepare, state, raw, body_cls)
    finally:
        state.num_preprocessing -= 1
    if trace is not None:
        trace.mark("body", prepared.request_id, received)
        trace.mark("prepared", prepared.request_id)
    return prepared, await admit(state, prepared)


def _prepare_inline(raw: bytes, body_cls) -> bool:
    return body_cls is CompletionRequest and len(raw) <= INLINE_PREPARE_MAX_BYTES and \
        _TOKEN_ID_PROMPT.search(raw) is not None


async def admit(state: ServerState, prepared: Prepared) -> "MultiStream":
    """Send one engine request per prompt and wait until the core has taken in all of
    them; if it refuses any, abort the others and raise the refusal's APIError."""
    prompts = prepared.prompts
    streams: list[RequestStream] = []
    try:
        for i, prompt in enumerate(prompts):
            engine_id = prepared.request_id if len(prompts) == 1 \
                else f"{prepared.request_id}-{i}"
            streams.append(await state.engine_client.add_request(
                engine_id, prompt.token_ids, prepared.params, prepared.body.priority,
                prompt=prompt.text))
        for stream in streams:
            await stream.wait_admitted()
    except BaseException as exc:
        _close_all(streams)
        if isinstance(exc, RequestRejected) or not isinstance(exc, ValueError):
            if isinstance(exc, Exception):  # dead core 503, refused 400, failed step 500
                raise from_engine_error(exc) from None
            raise
        raise bad_request(str(exc)) from None   # a duplicate request id
    return MultiStream(streams)


def _close_all(streams: list[RequestStream]) -> None:
    for stream in streams:
        stream.close()


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
        _close_all(self.streams)


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
