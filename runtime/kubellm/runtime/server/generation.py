"""From the bytes of a request to an admitted engine request, and the two ways of waiting
for its result (collect it whole while watching for a disconnect, or stream it).

Everything that can take time in proportion to the input — JSON parsing, validation, the
chat template, tokenization — runs in ``prepare`` on the front end's preprocessing
threads, never on the event loop: probes and streams keep answering while a prompt at the
size limit is tokenized (HF fast tokenizers release the GIL while they encode).
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass

from starlette.requests import Request

from kubellm.runtime.core.outputs import RequestOutput
from kubellm.runtime.core.sampling_params import SamplingParams
from kubellm.runtime.engine_core.streams import EngineDeadError, RequestStream
from kubellm.runtime.server.errors import APIError, bad_request, unavailable
from kubellm.runtime.server.protocol import (ChatCompletionRequest, CompletionRequest,
                                             parse_body)
from kubellm.runtime.server.responses import new_id
from kubellm.runtime.server.state import ServerState


class ClientDisconnected(Exception):
    """The client went away before its (non-streaming) response was ready."""


@dataclass
class Prepared:
    """A validated request, rendered and tokenized, ready for the engine."""
    body: CompletionRequest | ChatCompletionRequest
    request_id: str
    params: SamplingParams
    prompt_token_ids: list[int]
    prompt_text: str | None
    prompt_param: str           # the field a length error names


def check_model(state: ServerState, model: str | None) -> None:
    if model is not None and model != state.model_name:
        raise APIError(404, f"model '{model}' does not exist; this server serves "
                            f"'{state.model_name}'", param="model", code="model_not_found")


def check_chars(state: ServerState, num_chars: int, prompt_param: str) -> None:
    """Refuse before tokenizing a prompt whose length in characters alone proves it
    longer than the context (no token covers more than ``max_chars_per_token``)."""
    if num_chars > state.max_model_len * state.max_chars_per_token:
        raise bad_request(f"{prompt_param} has {num_chars} characters, more than this "
                          f"model's maximum context length of {state.max_model_len} tokens "
                          "can hold", param=prompt_param, code="context_length_exceeded")


def completion_prompt(state: ServerState, body: CompletionRequest
                      ) -> tuple[list[int], str | None]:
    """(token ids, text or None). A string is tokenized here, as offline
    ``LLM.generate`` tokenizes it."""
    prompt = body.single_prompt()
    if isinstance(prompt, str):
        check_chars(state, len(prompt), "prompt")
        return state.tokenizer.encode(prompt), prompt
    if len(prompt) >= state.max_model_len:  # before scanning a million ids
        raise bad_request(f"prompt has {len(prompt)} tokens; this model's maximum context "
                          f"length is {state.max_model_len}", param="prompt",
                          code="context_length_exceeded")
    bad = [t for t in prompt if not 0 <= t < state.vocab_size]
    if bad:
        raise bad_request(f"prompt holds token id {bad[0]}, out of range [0, {state.vocab_size})",
                          param="prompt")
    return list(prompt), None


def chat_prompt(state: ServerState, body: ChatCompletionRequest) -> list[int]:
    """Render the messages with the tokenizer's chat template; tokenize without adding
    special tokens again (the template already holds BOS where the model wants one)."""
    messages = body.template_messages()
    check_chars(state, sum(len(m["content"]) for m in messages), "messages")
    try:
        text = state.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=body.add_generation_prompt)
    except Exception as exc:  # jinja raises on role orders the template forbids
        raise bad_request(f"messages cannot be rendered by the chat template: {exc}",
                          param="messages") from None
    return state.tokenizer.encode(text, add_special_tokens=False)


def check_length(state: ServerState, num_prompt_tokens: int, params: SamplingParams,
                 prompt_param: str) -> None:
    limit = state.max_model_len
    if num_prompt_tokens == 0:
        raise bad_request(f"{prompt_param} must not be empty", param=prompt_param)
    if num_prompt_tokens >= limit:
        raise bad_request(f"{prompt_param} has {num_prompt_tokens} tokens; this model's "
                          f"maximum context length is {limit}", param=prompt_param,
                          code="context_length_exceeded")
    if params.max_tokens is not None and num_prompt_tokens + params.max_tokens > limit:
        raise bad_request(f"max_tokens={params.max_tokens} plus {num_prompt_tokens} prompt "
                          f"tokens exceeds this model's maximum context length {limit}",
                          param="max_tokens", code="context_length_exceeded")


def prepare(state: ServerState, raw: bytes, body_cls) -> Prepared:
    """Parse, validate, render and tokenize (on a preprocessing thread)."""
    body = parse_body(raw, body_cls)
    check_model(state, body.model)
    params = body.sampling_params()
    if isinstance(body, ChatCompletionRequest):
        ids, text, prompt_param = chat_prompt(state, body), None, "messages"
        request_id = new_id("chatcmpl")
    else:
        (ids, text), prompt_param = completion_prompt(state, body), "prompt"
        request_id = new_id("cmpl")
    check_length(state, len(ids), params, prompt_param)
    return Prepared(body, request_id, params, ids, text, prompt_param)


async def start(state: ServerState, raw: bytes, body_cls) -> tuple[Prepared, RequestStream]:
    """Prepare off the loop, then admit: (the prepared request, its stream)."""
    state.num_preprocessing += 1
    try:
        prepared = await asyncio.get_running_loop().run_in_executor(
            state.preprocess_pool, prepare, state, raw, body_cls)
    finally:
        state.num_preprocessing -= 1
    return prepared, await admit(state, prepared)


async def admit(state: ServerState, prepared: Prepared) -> RequestStream:
    try:
        return await state.engine_client.add_request(
            prepared.request_id, prepared.prompt_token_ids, prepared.params,
            prepared.body.priority, prompt=prepared.prompt_text)
    except EngineDeadError as exc:
        raise unavailable(f"{exc}; retry the request") from None
    except ValueError as exc:
        raise bad_request(str(exc)) from None


async def collect(stream: RequestStream, request: Request) -> RequestOutput:
    """The final output, or ClientDisconnected (after aborting) if the client leaves first."""
    async def last_output():
        last = None
        async for out in stream:
            last = out
        return last

    result = asyncio.ensure_future(last_output())
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
