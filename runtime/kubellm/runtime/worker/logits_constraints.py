"""What a request may change in its own logits before sampling: a grammar's token mask
(structured outputs), ``allowed_token_ids`` and ``logit_bias``.

Built once per sequence from its SamplingParams (plain data) into what the device needs,
and applied to the rows of a step's logits that carry them. Plain requests carry none,
and the sampler is told when a step holds no constrained request at all, so they pay
nothing for this file.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from kubellm.runtime.core.parameter_error import ParameterError
from kubellm.runtime.core.sampling_params import SamplingParams
from kubellm.runtime.worker.sampled_batch import to_device


@dataclass(slots=True)
class LogitsConstraints:
    grammar: object | None = None             # worker.grammar.GrammarState
    allowed_mask: torch.Tensor | None = None  # [vocab] bool on the device: may be sampled
    bias_ids: np.ndarray | None = None        # int64 token ids
    bias_values: np.ndarray | None = None     # float32, added to those logits

    @classmethod
    def create(cls, params: SamplingParams, vocab_size: int, device,
               grammar=None) -> "LogitsConstraints | None":
        """None when the request constrains nothing; ParameterError for ids outside the
        model's vocabulary."""
        if not params.needs_logits_processing:
            return None
        out = cls(grammar=grammar)
        if params.allowed_token_ids is not None:
            ids = _checked_ids("allowed_token_ids", params.allowed_token_ids, vocab_size)
            mask = torch.zeros(vocab_size, dtype=torch.bool)
            mask[torch.tensor(ids, dtype=torch.int64)] = True
            out.allowed_mask = mask.to(device)
        if params.logit_bias:
            ids = _checked_ids("logit_bias", list(params.logit_bias), vocab_size)
            out.bias_ids = np.asarray(ids, dtype=np.int64)
            out.bias_values = np.asarray(list(params.logit_bias.values()), dtype=np.float32)
        return out


def _checked_ids(param: str, ids: list[int], vocab_size: int) -> list[int]:
    bad = [t for t in ids if not 0 <= t < vocab_size]
    if bad:
        raise ParameterError(param, f"token id {bad[0]} is outside the vocabulary "
                                    f"[0, {vocab_size})")
    return ids


class ConstraintApplier:
    """Applies the constraints of a step's rows to its logits, in place. Keeps the
    grammar bitmask's host buffer between steps (pinned on CUDA)."""

    def __init__(self):
        self._bitmask: torch.Tensor | None = None

    def apply(self, logits: torch.Tensor, constraints: list[LogitsConstraints | None],
              output_token_ids: list[list[int]]) -> None:
        """``logits`` [B, V] fp32, a private copy; ``constraints[i]`` for row i (None for
        an unconstrained row); ``output_token_ids[i]`` what row i generated so far."""
        rows = [i for i, c in enumerate(constraints) if c is not None]
        if not rows:
            return
        grammar_rows = [i for i in rows if constraints[i].grammar is not None]
        if grammar_rows:
            self._apply_grammars(logits, constraints, output_token_ids, grammar_rows)
        allowed = [i for i in rows if constraints[i].allowed_mask is not None]
        if allowed:
            index = to_device(allowed, torch.int64, logits.device)
            masks = torch.stack([constraints[i].allowed_mask for i in allowed])
            logits[index] = logits[index].masked_fill(~masks, float("-inf"))
        biased = [i for i in rows if constraints[i].bias_ids is not None]
        if biased:
            vocab = logits.shape[1]
            flat = np.concatenate([constraints[i].bias_ids + i * vocab for i in biased])
            values = np.concatenate([constraints[i].bias_values for i in biased])
            logits.view(-1).index_add_(0, torch.from_numpy(flat).to(logits.device),
                                       torch.from_numpy(values).to(logits.device))

    def _apply_grammars(self, logits, constraints, output_token_ids, rows) -> None:
        import xgrammar as xgr  # loaded already: a grammar exists only once it was compiled
        batch, vocab = logits.shape
        bitmask = self._host_bitmask(batch, (vocab + 31) // 32, logits.device)
        # all allowed; grammar rows overwrite theirs (numpy: one thread, no pool wake-up)
        bitmask.numpy().fill(-1)
        for i in rows:
            grammar = constraints[i].grammar
            grammar.advance(output_token_ids[i])
            grammar.fill(bitmask, i)
        device_mask = bitmask if logits.device.type == "cpu" else \
            bitmask.to(logits.device, non_blocking=True)
        xgr.apply_token_bitmask_inplace(logits, device_mask, vocab_size=vocab, indices=rows)

    def _host_bitmask(self, batch: int, words: int, device) -> torch.Tensor:
        buf = self._bitmask
        if buf is None or buf.shape[0] < batch or buf.shape[1] != words:
            # the copy of the previous step's mask has landed: a step with a grammar waits
            # for its predecessor's tokens (reads_output_tokens), so reuse is safe
            buf = torch.empty((max(batch, 64), words), dtype=torch.int32,
                              pin_memory=torch.device(device).type == "cuda")
            self._bitmask = buf
        return buf[:batch]
