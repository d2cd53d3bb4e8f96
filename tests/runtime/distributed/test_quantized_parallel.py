"""A 4-bit model over tensor-parallel ranks (CPU, gloo): each rank quantizes its own slice
of every linear, and the tokens equal the single process's."""
from __future__ import annotations

from tests.runtime.distributed.conftest import run_llm_job

PROMPTS = [[1000 + i, 2000 + 3 * i, 7, 9 + i] for i in range(3)]
PARAMS = [{"temperature": 0.0, "max_tokens": 8, "ignore_eos": True}] * 3
ENGINE = {"dtype": "float32", "device": "cpu", "num_kv_blocks": 16, "max_model_len": 64,
          "quantization": "4bit", "quantization_group_size": 32}


def test_4bit_tensor_parallel_tokens_equal_one_process(tiny_model_factory, tmp_path):
    model = tiny_model_factory("llama-4layers")
    one = run_llm_job(tmp_path, model, ENGINE, PROMPTS, PARAMS, name="tp1")
    two = run_llm_job(tmp_path, model, {**ENGINE, "tensor_parallel_size": 2}, PROMPTS,
                      PARAMS, name="tp2")
    assert two["token_ids"] == one["token_ids"]
    assert len(two["ranks"]) == 2
