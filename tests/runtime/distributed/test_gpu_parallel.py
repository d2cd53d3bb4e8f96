"""The same layouts on GPUs: NCCL for activations and logits, a gloo group for the
per-step metadata, CUDA device = local rank, the Triton attention backend."""
from __future__ import annotations

import pytest

from tests.runtime.distributed.conftest import run_llm_job
from tests.runtime.distributed.test_parallel_generate import ENGINE, PARAMS, PROMPTS


def _gpus() -> int:
    import torch
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


# a marker, not a skip in the body: it holds before the fixtures run (a one-GPU machine
# without the tokenizer package errored in their setup instead of skipping, s22 call 86)
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(_gpus() < 2, reason=f"needs 2 GPUs, {_gpus()} visible")]


@pytest.mark.parametrize("tp, pp", [(2, 1), (1, 2)])
def test_two_gpus_match_one(tiny_model_factory, tmp_path, tp, pp):
    model = tiny_model_factory("llama-4layers")
    engine = {**ENGINE, "device": "cuda"}
    env = {"KUBELLM_DEVICE": "cuda"}
    reference = run_llm_job(tmp_path, model, engine, PROMPTS, PARAMS, env, name="one")
    result = run_llm_job(tmp_path, model, {**engine, "tensor_parallel_size": tp,
                                           "pipeline_parallel_size": pp},
                         PROMPTS, PARAMS, env, name=f"tp{tp}-pp{pp}")
    assert result["num_preemptions"] > 0
    assert result["token_ids"] == reference["token_ids"]
