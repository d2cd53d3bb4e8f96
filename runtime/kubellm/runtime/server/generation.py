"""From a validated request to an admitted engine request: model check, prompt rendering
and tokenization, length checks, admission; and the two ways of waiting for the result
(collect it whole while watching for a disconnect, or stream it)."""
from __future__ import annotations

import asyncio

from starlette.requests import Request

from kubellm.runtime.core.outputs import RequestOutput
from kubellm.runtime.core.sampling_params import ParameterError, SamplingParams
from kubellm.runtime.server.async_engine import RequestStream
from kubellm.runtime.server.errors import APIError, bad_request
from kubellm.runtime.server.protocol import ChatCompletionRequest, CompletionRequest
from kubellm.runtime.server.responses import new_id
from kubellm.runtime.server.state import ServerState

from kubellm.runtime.engine.llm_engine import PromptTooLongError, TokenizedPrompt


class ClientDisconnected(Exception):
    """The client went away before its (non-streaming) response was ready."""


def check_model(state: ServerState, model: str | None) -> None:
    if model is not None and model != state.model_name:
        raise APIError(404, f"model '{model}' does not exist; this server serves "
                            f"'{state.model_name}'", param="model", code="model_not_found")


def completion_prompt(state: ServerState, body: CompletionRequest
                      ) -> tuple[TokenizedPrompt | list[int], int]:
    """(prompt for the engine, its length in tokens). A string is tokenized here, as
    offline ``LLM.generate`` tokenizes it, and goes to the engine with its ids."""
    prompt = body.single_prompt()
    if isinstance(prompt, str):
        ids = state.tokenizer.encode(prompt)
        return TokenizedPrompt(prompt, ids), len(ids)
    bad = [t for t in prompt if not 0 <= t < state.vocab_size]
    if bad:
        raise bad_request(f"prompt holds token id {bad[0]}, out of range [0, {state.vocab_size})",
                          param="prompt")
    return prompt, len(prompt)


def chat_prompt(state: ServerState, body: ChatCompletionRequest) -> tuple[list[int], int]:
    """Render the messages with the tokenizer's chat template; tokenize without adding
    special tokens again (the template already holds BOS where the model wants one)."""
    try:
        text = state.tokenizer.apply_chat_template(
            body.template_messages(), tokenize=False,
            add_generation_prompt=body.add_generation_prompt)
    except Exception as exc:  # jinja raises on role orders the template forbids
        raise bad_request(f"messages cannot be rendered by the chat template: {exc}",
                          param="messages") from None
    ids = state.tokenizer.encode(text, add_special_tokens=False)
    return ids, len(ids)


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


async def start(state: ServerState, body: CompletionRequest | ChatCompletionRequest
                ) -> tuple[str, SamplingParams, RequestStream]:
    """Validate, render, check and admit one request: (request id, params, its stream)."""
    check_model(state, body.model)
    params = body.sampling_params()
    if isinstance(body, ChatCompletionRequest):
        (prompt, num_tokens), prompt_param = chat_prompt(state, body), "messages"
        request_id = new_id("chatcmpl")
    else:
        (prompt, num_tokens), prompt_param = completion_prompt(state, body), "prompt"
        request_id = new_id("cmpl")
    check_length(state, num_tokens, params, prompt_param)
    stream = await admit(state, request_id, prompt, params, body.priority, prompt_param)
    return request_id, params, stream


async def admit(state: ServerState, request_id: str, prompt: TokenizedPrompt | list[int],
                params: SamplingParams, priority: int, prompt_param: str) -> RequestStream:
    try:
        return await state.async_engine.add_request(request_id, prompt, params, priority)
    except PromptTooLongError as exc:
        raise bad_request(str(exc), param=prompt_param,
                          code="context_length_exceeded") from None
    except ParameterError as exc:
        raise bad_request(str(exc), param=exc.param) from None
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
