"""The startup warm-up of the short-prefill kernels (memory_profiler.warm_short_prefill):
one forward of a short prompt that touches no KV block (its slots are -1)."""
import torch

from kubellm.runtime import LLM
from kubellm.runtime.worker.memory_profiler import _SHORT_PREFILL, warm_short_prefill


def test_warm_up_runs_the_model_and_writes_no_kv_block(tiny_model_factory):
    llm = LLM(tiny_model_factory("llama3"), dtype="float32", attention_backend="triton",
              max_model_len=2 * _SHORT_PREFILL, block_size=16)
    runner = llm.engine.executor
    before = [layer.k_cache.clone() for layer in runner.attn_layers]
    blocks = _SHORT_PREFILL // runner.block_size
    warm_short_prefill(runner, torch.arange(blocks, dtype=torch.int32)[None, :])
    assert all(torch.equal(b, layer.k_cache) for b, layer in zip(before, runner.attn_layers))
