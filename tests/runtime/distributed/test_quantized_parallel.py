"""A 4-bit model over tensor- and pipeline-parallel ranks (CPU, gloo): each rank quantizes
its own slice of every linear of its own stage (the LM head too: quantize_lm_head), and
the tokens equal the single process's. The same for an FP8 KV cache: every rank's pool is
E4M3 and the tokens are the single process's with that cache."""
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


FP8_KV = {"dtype": "float32", "device": "cpu", "num_kv_blocks": 16, "max_model_len": 64,
          "kv_cache_dtype": "fp8"}
FP8_WEIGHTS = {**ENGINE, "quantization": "fp8", "quantize_lm_head": False}
del FP8_WEIGHTS["quantization_group_size"]


def grid_and_one_process(tiny_model_factory, tmp_path, engine) -> tuple[dict, dict]:
    """The same job on TP2 x PP2 ranks and in one process."""
    model = tiny_model_factory("llama-4layers")
    one = run_llm_job(tmp_path, model, engine, PROMPTS, PARAMS, name="one")
    grid = run_llm_job(tmp_path, model, {**engine, "tensor_parallel_size": 2,
                                         "pipeline_parallel_size": 2}, PROMPTS, PARAMS,
                       name="tp2pp2")
    return grid, one


def test_fp8_weights_sharded_over_tp_and_pp_give_the_single_process_tokens(
        tiny_model_factory, tmp_path):
    """Every rank holds the single process's codes and scales, cut like the float weight
    (row-parallel slices on their whole rows' scales: fp8.py), so each rank's partial
    sum is part of the single process's and the grid's tokens are its tokens."""
    grid, one = grid_and_one_process(tiny_model_factory, tmp_path, FP8_WEIGHTS)
    assert grid["token_ids"] == one["token_ids"]
    fp8_params = [n for r in grid["ranks"] for n in r["params"] if n.endswith("weight_fp8")]
    assert fp8_params and len(grid["ranks"]) == 4


def test_fp8_kv_cache_on_every_rank_gives_the_single_process_tokens(tiny_model_factory,
                                                                     tmp_path):
    grid, one = grid_and_one_process(tiny_model_factory, tmp_path, FP8_KV)
    assert grid["token_ids"] == one["token_ids"]
    assert [r["kv_cache_dtype"] for r in grid["ranks"]] == ["float8_e4m3fn"] * 4
