"""One step's samples while they are still on the device, and the same on the host.

The sampler returns a SampledBatch at once: its token ids can feed the next step's
inputs on the device (async scheduling), and its copy into pinned host memory is queued
behind the kernels that produce it, so ``result()`` waits for that copy alone.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from kubellm.runtime.core.sampling_params import SamplingParams


@dataclass(slots=True)
class SamplerOutput:
    token_ids: list[int]
    # Per row: {sampled id: logprob, top-k ids: logprob}, or None if not requested.
    logprobs: list[dict[int, float] | None]


class SampledBatch:
    """One step's samples, still on the device: the token ids (what the next step's
    inputs read when the engine runs ahead) and, for rows that asked, the logprob
    tensors. ``start_copy`` queues their copy into pinned host memory behind the work
    that produces them; ``result`` waits for that copy alone and builds the lists."""

    def __init__(self, token_ids: torch.Tensor, params: list[SamplingParams],
                 logprob_rows: list[int]):
        self.token_ids = token_ids
        self._params = params
        self._logprob_rows = logprob_rows
        self._device_parts: list[torch.Tensor] = [token_ids]
        self._host_parts: list[torch.Tensor] | None = None
        self._done: torch.cuda.Event | None = None
        self._output: SamplerOutput | None = None

    def add_logprobs(self, raw_logits: torch.Tensor) -> None:
        """Logprobs of the sampled token and the top ones, from the RAW logits."""
        rows = self._logprob_rows
        index = to_device(rows, torch.int64, raw_logits.device)
        logprobs = raw_logits[index].to(torch.float32).log_softmax(dim=-1)
        chosen = self.token_ids[index]
        parts = [chosen, logprobs.gather(1, chosen.unsqueeze(1)).squeeze(1)]
        num_top = max(self._params[i].logprobs for i in rows)
        if num_top:
            parts += list(logprobs.topk(num_top, dim=-1))
        self._device_parts += parts

    def start_copy(self) -> None:
        device = self.token_ids.device
        if device.type != "cuda":
            self._host_parts = self._device_parts
            return
        self._host_parts = [torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
                            for t in self._device_parts]
        for host, dev in zip(self._host_parts, self._device_parts):
            host.copy_(dev, non_blocking=True)
        self._done = torch.cuda.Event()
        self._done.record()

    def result(self) -> SamplerOutput:
        if self._output is None:
            if self._done is not None:
                self._done.synchronize()
            self._output = self._build()
        return self._output

    def _build(self) -> SamplerOutput:
        parts = [t.tolist() for t in self._host_parts]
        token_ids = parts[0]
        logprobs: list[dict[int, float] | None] = [None] * len(token_ids)
        if self._logprob_rows:
            chosen, chosen_lp = parts[1], parts[2]
            top_lp, top_ids = (parts[3], parts[4]) if len(parts) > 3 else ([], [])
            for j, i in enumerate(self._logprob_rows):
                entry = {chosen[j]: chosen_lp[j]}
                for t in range(self._params[i].logprobs):
                    entry.setdefault(top_ids[j][t], top_lp[j][t])
                logprobs[i] = entry
        return SamplerOutput(token_ids, logprobs)


def to_device(values: list, dtype: torch.dtype, device) -> torch.Tensor:
    """A small host list on ``device`` without waiting for the GPU: a blocking
    host-to-device copy would stall the host until the step running ahead finishes."""
    host = torch.tensor(values, dtype=dtype)
    return host if torch.device(device).type == "cpu" else host.to(device, non_blocking=True)
