"""Request prompts to token ids, on the server's side: completions prompts (text or ids,
one or many), chat messages through the chat template, truncation, and the length and
vocabulary checks that give a 400 before anything reaches the engine."""
from __future__ import annotations

from dataclasses import dataclass

from kubellm.runtime.core.sampling_params import ParameterError, SamplingParams
from kubellm.runtime.engine.chat import render_chat
from kubellm.runtime.server.errors import bad_request
from kubellm.runtime.server.protocol_chat import ChatCompletionRequest
from kubellm.runtime.server.state import ServerState


@dataclass
class Prompt:
    text: str | None            # what the client sent (None for token ids)
    token_ids: list[int]        # what the engine runs (after truncation)
    param: str = "prompt"       # the request field it came from, for errors

    def echo_text(self, tokenizer) -> str:
        return self.text if self.text is not None else tokenizer.decode(self.token_ids)


def check_chars(state: ServerState, num_chars: int, prompt_param: str) -> None:
    """Refuse before tokenizing a prompt whose length in characters alone proves it
    longer than the context (no token covers more than ``max_chars_per_token``)."""
    if num_chars > state.max_model_len * state.max_chars_per_token:
        raise bad_request(f"{prompt_param} has {num_chars} characters, more than this "
                          f"model's maximum context length of {state.max_model_len} tokens "
                          "can hold", param=prompt_param, code="context_length_exceeded")


def completion_prompts(state: ServerState, prompts: list, truncate: int | None
                       ) -> list[Prompt]:
    """Each text prompt tokenized (as offline ``LLM.generate`` does), each id list
    checked against the vocabulary. Without truncation, a prompt whose length alone
    proves it too long is refused before it is tokenized or scanned."""
    out = []
    for i, prompt in enumerate(prompts):
        if isinstance(prompt, str):
            if truncate is None:  # truncation may keep the tail of any prompt
                check_chars(state, len(prompt), "prompt")
            ids = state.tokenizer.encode(prompt)
            text = prompt
        else:
            if truncate is None and len(prompt) >= state.max_model_len:
                raise bad_request(f"prompt has {len(prompt)} tokens; this model's maximum "
                                  f"context length is {state.max_model_len}", param="prompt",
                                  code="context_length_exceeded")
            bad = [t for t in prompt if not 0 <= t < state.vocab_size]
            if bad:
                raise bad_request(f"prompt holds token id {bad[0]}, out of range "
                                  f"[0, {state.vocab_size})", param="prompt")
            ids, text = list(prompt), None
        if truncate is not None and len(ids) > truncate:
            ids, text = ids[-truncate:], None   # the text no longer matches: re-decode
        out.append(Prompt(text, ids))
    return out


def chat_prompt(state: ServerState, body: ChatCompletionRequest) -> Prompt:
    """Render the messages (and tools) with the chat template; tokenize without adding
    special tokens again (the template already holds BOS where the model wants one)."""
    template = state.chat_template
    if body.chat_template is not None:
        template = body.chat_template
    try:
        text = render_chat(state.tokenizer, body.template_messages(), chat_template=template,
                           tools=body.tool_dicts(),
                           add_generation_prompt=body.add_generation_prompt,
                           continue_final_message=body.continue_final_message,
                           chat_template_kwargs=body.template_kwargs())
    except ParameterError as exc:
        raise bad_request(exc.message if exc.param in exc.message else str(exc),
                          param=exc.param) from None
    truncate = body.truncate_prompt_tokens
    if truncate is None:
        check_chars(state, len(text), "messages")
    ids = state.tokenizer.encode(text, add_special_tokens=body.add_special_tokens)
    if truncate is not None and len(ids) > truncate:
        ids = ids[-truncate:]
    return Prompt(text, ids, param="messages")


def check_length(state: ServerState, prompt: Prompt, params: SamplingParams) -> None:
    limit = state.max_model_len
    num_tokens = len(prompt.token_ids)
    if num_tokens == 0:
        raise bad_request(f"{prompt.param} must not be empty", param=prompt.param)
    if num_tokens >= limit:
        raise bad_request(f"{prompt.param} has {num_tokens} tokens; this model's maximum "
                          f"context length is {limit}", param=prompt.param,
                          code="context_length_exceeded")
    if params.max_tokens is not None and num_tokens + params.max_tokens > limit:
        raise bad_request(f"max_tokens={params.max_tokens} plus {num_tokens} prompt tokens "
                          f"exceeds this model's maximum context length {limit}",
                          param="max_tokens", code="context_length_exceeded")
