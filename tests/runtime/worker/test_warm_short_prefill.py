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


def test_warm_up_runs_a_step_of_short_prompts_through_the_prefill_kernel(
        tiny_model_factory, monkeypatch):
    """Where a step can hold PREFILL_KERNEL_MIN_STEP_TOKENS (scaled down here), the
    warm-up also runs such a step of prompts under PREFILL_KERNEL_MIN_QUERY: the prefill
    kernel's short-prompt bucket tunes at startup. Without the switch, or with a smaller
    step budget, or for a model of more query heads per KV head than such steps take the
    prefill kernel for, it does not."""
    monkeypatch.setattr(triton_backend, "PREFILL_KERNEL_MIN_STEP_TOKENS", 300)
    llm = LLM(tiny_model_factory("llama3"), dtype="float32", attention_backend="triton",
              max_model_len=2 * _SHORT_PREFILL, block_size=16,
              kernel_switches="prefill_attention")
    runner = llm.engine.executor
    before = [layer.k_cache.clone() for layer in runner.attn_layers]
    calls = []
    real = triton_backend._prefill_attention

    def recorded(q, *args, **kwargs):
        calls.append((q.shape[0], args[-2]))   # (the step's tokens, max_seqlen_q)
        return real(q, *args, **kwargs)
    monkeypatch.setattr(triton_backend, "_prefill_attention", recorded)
    # the profile's table row: 256 keys, the longest prompt the warm-up forwards (the
    # paged kernel reads every key of its prompts through it)
    table = torch.arange(_SHORT_PREFILL // runner.block_size, dtype=torch.int32)[None, :]
    warm_short_prefill(runner, table, max_num_batched_tokens=300)
    layers = len(runner.attn_layers)
    assert calls == [(300, 150)] * layers      # two prompts of 150 tokens, one step
    assert all(torch.equal(b, layer.k_cache) for b, layer in zip(before, runner.attn_layers))
    calls.clear()
    warm_short_prefill(runner, table, max_num_batched_tokens=299)
    # a model of more query heads per KV head (2 here) than such steps take it for
    monkeypatch.setattr(triton_backend, "PREFILL_KERNEL_STEP_MAX_GROUP", 1)
    warm_short_prefill(runner, table, max_num_batched_tokens=300)
    monkeypatch.setattr(triton_backend, "PREFILL_KERNEL_STEP_MAX_GROUP", 4)
    runner.switches.prefill_attention = False
    warm_short_prefill(runner, table, max_num_batched_tokens=300)
    assert calls == []
