"""The body of POST /v1/completions (OpenAI's legacy completions, vLLM's extensions)."""
from __future__ import annotations

from kubellm.runtime.core.sampling_params import SamplingParams
from kubellm.runtime.server.errors import bad_request
from kubellm.runtime.server.protocol import _SamplingFields

MAX_PROMPTS = 1024   # prompts in one request (lm-eval sends batch_size of them)


class CompletionRequest(_SamplingFields):
    prompt: str | list[int] | list[str] | list[list[int]]
    max_tokens: int | None = 16
    logprobs: int | None = None
    echo: bool = False
    best_of: int | None = None

    def to_sampling_params(self, defaults: dict, max_logprobs: int) -> SamplingParams:
        self.check_common(max_logprobs)
        if self.best_of is not None and self.best_of != self.n:
            raise bad_request("best_of must equal n (beam search is not supported)",
                              param="best_of")
        if self.logprobs is not None and not 0 <= self.logprobs <= max_logprobs:
            raise bad_request(f"logprobs must be in 0..{max_logprobs}", param="logprobs")
        max_tokens = self.max_tokens
        if max_tokens == 0:
            if not self.echo:
                raise bad_request("max_tokens: 0 is only allowed with echo (the prompt's "
                                  "logprobs, no generation)", param="max_tokens")
            max_tokens = 1   # one token is generated and left out of the response
        prompt_logprobs = self.prompt_logprobs
        if self.echo and self.logprobs is not None:
            # echo with logprobs scores the prompt too: what evaluation harnesses read
            prompt_logprobs = max(self.logprobs, prompt_logprobs or 0)
        return self.sampling_params(defaults, max_tokens, self.logprobs,
                                    prompt_logprobs=prompt_logprobs)

    @property
    def echo_only(self) -> bool:
        """echo with max_tokens 0: the response holds the prompt alone."""
        return self.echo and self.max_tokens == 0

    def prompts(self) -> list[str | list[int]]:
        """Each prompt of the request: a string or a list of token ids."""
        prompt = self.prompt
        if isinstance(prompt, str) or (prompt and isinstance(prompt[0], int)):
            prompts = [prompt]
        else:
            prompts = list(prompt)
        if not prompts:
            raise bad_request("prompt must not be empty", param="prompt")
        if len(prompts) > MAX_PROMPTS:
            raise bad_request(f"at most {MAX_PROMPTS} prompts per request", param="prompt")
        for i, p in enumerate(prompts):
            if len(p) == 0:
                name = "prompt" if len(prompts) == 1 else f"prompt[{i}]"
                raise bad_request(f"{name} must not be empty", param="prompt")
        return prompts
