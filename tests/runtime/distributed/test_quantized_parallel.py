"""A 4-bit model over tensor- and pipeline-parallel ranks (CPU, gloo): each rank quantizes
its own slice of every linear of its own stage (the LM head too: quantize_lm_head), and
the tokens equal the single process's. The same for FP8 weights with an FP8 KV cache."""
from __future__ import annotations

import pytest

from tests.runtime.distributed.conftest import run_llm_job

PROMPTS = [[1000 + i, 2000 + 3 * i, 7, 9 + i] for i in range(3)]
PARAMS = [{"temperature": 0.0, "max_tokens": 8, "ignore_eos": True}] * 3
ENGINE = {"dtype": "float32", "device": "cpu", "num_kv_blocks": 16, "max_model_len": 64,
          "quantization": "4bit", "quantization_group_size": 32, "quantize_lm_head": True}


@pytest.fixture(scope="module")
def one_process(tiny_model_factory, tmp_path_factory):
    model = tiny_model_factory("llama-4layers")
    return model, run_llm_job(tmp_path_factory.mktemp("tp1"), model, ENGINE, PROMPTS, PARAMS)


@pytest.mark.parametrize("tp, pp", [(2, 1), (1, 2)], ids=["tp2", "pp2"])
def test_4bit_parallel_tokens_equal_one_process(one_process, tmp_path, tp, pp):
    model, one = one_process
    result = run_llm_job(tmp_path, model, {**ENGINE, "tensor_parallel_size": tp,
                                           "pipeline_parallel_size": pp}, PROMPTS, PARAMS)
    assert result["token_ids"] == one["token_ids"]
    assert len(result["ranks"]) == tp * pp


# FP8 weights and an FP8 KV cache in one job (each grid run costs ~20 s of CI)
FP8 = {**ENGINE, "quantization": "fp8", "quantize_lm_head": False, "kv_cache_dtype": "fp8"}
del FP8["quantization_group_size"]


def test_fp8_weights_and_kv_cache_over_tp_and_pp_give_the_single_process_tokens(
        tiny_model_factory, tmp_path):
    """Every rank holds the single process's FP8 codes and scales, cut like the float
    weight (row-parallel slices on their whole rows' scales: fp8.py), so each rank's
    partial sum is part of the single process's; every rank's KV pool is E4M3. The
    grid's tokens are the single process's."""
    model = tiny_model_factory("llama-4layers")
    one = run_llm_job(tmp_path, model, FP8, PROMPTS, PARAMS, name="one")
    grid = run_llm_job(tmp_path, model, {**FP8, "tensor_parallel_size": 2,
                                         "pipeline_parallel_size": 2}, PROMPTS, PARAMS,
                       name="tp2pp2")
    assert grid["token_ids"] == one["token_ids"]
    assert len(grid["ranks"]) == 4
    assert all(any(n.endswith("weight_fp8") for n in r["params"]) for r in grid["ranks"])
    assert [r["kv_cache_dtype"] for r in grid["ranks"]] == ["float8_e4m3fn"] * 4
