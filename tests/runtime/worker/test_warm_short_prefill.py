"""The startup warm-up of the short-prefill kernels (memory_profiler.warm_short_prefill):
forwards of short prompts that touch no KV block (their slots are -1), one for each
tile size the paged kernel takes for steps with prefills, so that none autotunes in a
request."""
import torch

from kubellm.kernels.paged_attention import _rows_per_program
from kubellm.runtime import LLM
from kubellm.runtime.attention import triton_backend
from kubellm.runtime.worker.memory_profiler import _SHORT_PREFILL, warm_short_prefill


def test_warm_up_tunes_every_prefill_tile_and_writes_no_kv_block(tiny_model_factory,
                                                                  monkeypatch):
    llm = LLM(tiny_model_factory("llama3"), dtype="float32", attention_backend="triton",
              max_model_len=2 * _SHORT_PREFILL, block_size=16,
              kernel_switches="prefill_attention")   # as on Hopper
    runner = llm.engine.executor
    before = [layer.k_cache.clone() for layer in runner.attn_layers]
    seen = []
    real = triton_backend.paged_attention

    def recorded(q, k_cache, v_cache, meta, scale, switches=None):
        seen.append(meta.max_seqlen_q)
        return real(q, k_cache, v_cache, meta, scale, switches)
    monkeypatch.setattr(triton_backend, "paged_attention", recorded)
    blocks = _SHORT_PREFILL // runner.block_size
    warm_short_prefill(runner, torch.arange(blocks, dtype=torch.int32)[None, :])
    assert all(torch.equal(b, layer.k_cache) for b, layer in zip(before, runner.attn_layers))
    layer = runner.attn_layers[0]
    group = layer.num_heads // layer.num_kv_heads
    tiles = {_rows_per_program(n, group)[0] for n in seen}
    prefill_tiles = {_rows_per_program(n, group)[0] for n in (2, 17, 300, 2047)}
    assert tiles == prefill_tiles == {64, 128}
