"""--kv-cache-dtype fp8 through the whole engine on CPU: the pool is FP8 E4M3 and holds
four times the blocks of a float32 one in the same memory, and both attention backends
(torch; Triton's kernels in the interpreter) keep greedy tokens next to transformers'
best on the same weights, across chunked prefill and prefix caching."""
from __future__ import annotations

import logging

import pytest
import torch

from benchmarks.common.agreement import teacher_forced_gaps
from kubellm.runtime import LLM, SamplingParams
from kubellm.runtime.config import EngineConfig
from kubellm.runtime.config_sources import ConfigError
from kubellm.runtime.engine_core.core_proc import cache_config_info
from tests.runtime.engine.test_kernel_switches import shared_prefix_prompts

MAX_TOKENS = 8
# E4M3 keeps 3 mantissa bits: a token the float cache would also pick sits within a
# fraction of a std of transformers' best; a wrong read puts it ~4-5 std below
MAX_GAP_STD = 1.0


def test_the_pool_is_fp8_and_holds_four_times_the_float32_blocks(tiny_model_dir, caplog):
    float32 = LLM(tiny_model_dir, dtype="float32", cpu_kv_cache_gb=0.01)
    with caplog.at_level(logging.INFO, logger="kubellm"):
        fp8 = LLM(tiny_model_dir, dtype="float32", cpu_kv_cache_gb=0.01, kv_cache_dtype="fp8")
    runner = fp8.engine.executor
    assert runner.kv_dtype == torch.float8_e4m3fn and runner.dtype == torch.float32
    assert {layer.k_cache.dtype for layer in runner.attn_layers} == {torch.float8_e4m3fn}
    assert {layer.v_cache.dtype for layer in runner.attn_layers} == {torch.float8_e4m3fn}
    assert runner.kv_bytes_per_block() * 4 == float32.engine.executor.kv_bytes_per_block()
    blocks = float32.engine.kv.num_blocks
    assert 4 * blocks <= fp8.engine.kv.num_blocks < 4 * (blocks + 1)
    assert "float8_e4m3fn" in caplog.text
    assert cache_config_info(fp8.engine)["cache_dtype"] == "fp8"
    assert cache_config_info(float32.engine)["cache_dtype"] == "auto"


@pytest.fixture(scope="module")
def reference(tiny_model_factory):
    from transformers import AutoModelForCausalLM
    path = tiny_model_factory("llama3")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    return path, shared_prefix_prompts(11), model


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_greedy_tokens_stay_next_to_transformers_best(reference, backend):
    path, prompts, hf = reference
    llm = LLM(path, dtype="float32", attention_backend=backend, block_size=8,
              max_num_batched_tokens=32, kv_cache_dtype="fp8")
    outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS,
                                                ignore_eos=True))
    assert llm.engine.kv.prefix_hits > 0, "the shared prefix was meant to be cached"
    for p, o in zip(prompts, outs):
        ours = o.outputs[0].token_ids
        assert len(ours) == MAX_TOKENS
        gaps = teacher_forced_gaps(hf, p, ours, "cpu")
        assert float(gaps.max()) <= MAX_GAP_STD, (ours, gaps.tolist())
    cached = torch.cat([layer.k_cache.view(torch.uint8).flatten()
                        for layer in llm.engine.executor.attn_layers])
    assert cached.any(), "keys were meant to be written into the FP8 pool"


@pytest.mark.parametrize("value", ["fp8_e5m2", "int8", "float16"])
def test_an_unbuilt_cache_dtype_is_a_config_error_naming_the_field(value):
    with pytest.raises(ConfigError, match="kv_cache_dtype") as err:
        EngineConfig(kv_cache_dtype=value)
    assert "auto, fp8, fp8_e4m3" in str(err.value)
