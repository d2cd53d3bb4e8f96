"""POST /tokenize and /detokenize and GET /tokenizer_info, as vLLM serves them (at the
root, beside /v1): evaluation harnesses tokenize through the server instead of loading
the tokenizer themselves (lm-eval's ``tokenizer_backend=remote``)."""
from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request

from kubellm.runtime.core.sampling_params import ParameterError
from kubellm.runtime.engine.chat import render_chat
from kubellm.runtime.server.errors import bad_request
from kubellm.runtime.server.generation import check_model
from kubellm.runtime.server.protocol import _Body, parse_body
from kubellm.runtime.server.protocol_chat import ChatMessage, Tool
from kubellm.runtime.server.routes_openai import _documented_body

router = APIRouter()


class TokenizeRequest(_Body):
    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_special_tokens: bool | None = None   # default: true for prompt, false for messages
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    tools: list[Tool] | None = None
    return_token_strs: bool = False


class DetokenizeRequest(_Body):
    model: str | None = None
    tokens: list[int]


async def _off_loop(request: Request, work):
    """Parse and (de)tokenize on the preprocessing threads, as the completion routes do:
    a body at the size limit must not stall the event loop."""
    state = request.app.state.kubellm
    raw = await request.body()
    state.num_preprocessing += 1
    try:
        return await asyncio.get_running_loop().run_in_executor(
            state.preprocess_pool, work, state, raw)
    finally:
        state.num_preprocessing -= 1


@router.post("/tokenize", openapi_extra=_documented_body(TokenizeRequest))
async def tokenize(request: Request):
    return await _off_loop(request, _tokenize)


def _tokenize(state, raw: bytes) -> dict:
    body = parse_body(raw, TokenizeRequest)
    check_model(state, body.model)
    if (body.prompt is None) == (body.messages is None):
        raise bad_request("give either prompt or messages", param="prompt")
    if body.prompt is not None:
        text, special = body.prompt, body.add_special_tokens is not False
    else:
        try:
            text = render_chat(
                state.tokenizer, [m.model_dump(exclude_none=True) for m in body.messages],
                chat_template=body.chat_template or state.chat_template,
                tools=[t.model_dump(exclude_none=True) for t in body.tools or []] or None,
                add_generation_prompt=body.add_generation_prompt,
                continue_final_message=body.continue_final_message,
                chat_template_kwargs=body.chat_template_kwargs)
        except ParameterError as exc:
            raise bad_request(str(exc), param=exc.param) from None
        special = bool(body.add_special_tokens)
    ids = state.tokenizer.encode(text, add_special_tokens=special)
    strs = state.tokenizer.convert_ids_to_tokens(ids) if body.return_token_strs else None
    return {"count": len(ids), "max_model_len": state.max_model_len, "tokens": ids,
            "token_strs": strs}


@router.post("/detokenize", openapi_extra=_documented_body(DetokenizeRequest))
async def detokenize(request: Request):
    return await _off_loop(request, _detokenize)


def _detokenize(state, raw: bytes) -> dict:
    body = parse_body(raw, DetokenizeRequest)
    check_model(state, body.model)
    bad = [t for t in body.tokens if not 0 <= t < state.vocab_size]
    if bad:
        raise bad_request(f"tokens: token id {bad[0]} is out of range [0, {state.vocab_size})",
                          param="tokens")
    return {"prompt": state.tokenizer.decode(body.tokens)}


@router.get("/tokenizer_info")
async def tokenizer_info(request: Request):
    state = request.app.state.kubellm
    tok = state.tokenizer
    template = state.chat_template or getattr(tok, "chat_template", None)
    return {"tokenizer_class": type(tok).__name__,
            "eos_token": tok.eos_token, "bos_token": tok.bos_token,
            "pad_token": tok.pad_token, "unk_token": tok.unk_token,
            "model_max_length": state.max_model_len, "vocab_size": len(tok),
            "chat_template": template if isinstance(template, str) else None}
