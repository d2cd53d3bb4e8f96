"""Engines one after another in one process on a GPU: single-process, multi-process at one
rank (a one-rank NCCL group, CUDA graphs and async scheduling through the distributed
path), single-process again. Equal greedy tokens, and after each shutdown the GPU memory
is back to what it was after the first (which created the CUDA context, cuBLAS workspaces
and Triton's caches for good)."""
from __future__ import annotations

import random

import pytest
import torch

from benchmarks.common.shapes import LLAMA3_8B, write_config

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip(reason="needs a CUDA GPU", allow_module_level=True)

ALLOCATED_SLACK_MIB = 16    # a stray small tensor, not an engine's weights or KV pool
DEVICE_USED_SLACK_MIB = 256  # allocator and driver bookkeeping; a KV pool is many GiB


def _used() -> dict:
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    return {"allocated": torch.cuda.memory_allocated() / 2**20,
            "device_used": (total - free) / 2**20}


def test_uni_mp_uni_in_one_process(tmp_path):
    from kubellm.runtime import LLM, SamplingParams
    model = write_config(LLAMA3_8B, tmp_path / "model", num_hidden_layers=2)
    rng = random.Random(0)
    prompts = [[rng.randrange(1000, 100000) for _ in range(rng.randint(5, 300))]
               for _ in range(8)]
    params = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True, detokenize=False)
    tokens, used = [], []
    for backend in ("uni", "mp", "uni"):
        with LLM(model, load_format="dummy", skip_tokenizer_init=True, max_model_len=2048,
                 max_num_seqs=16, gpu_memory_utilization=0.5,
                 distributed_executor_backend=backend) as llm:
            assert llm.engine.run_ahead
            assert llm.engine.executor.runner.graphs is not None if backend == "mp" \
                else llm.engine.executor.graphs is not None
            tokens.append([o.outputs[0].token_ids for o in llm.generate(prompts, params)])
        used.append(_used())
    print(f"memory after each shutdown (MiB): {used}")
    assert tokens[1] == tokens[0] and tokens[2] == tokens[0]
    for after in used[1:]:
        assert after["allocated"] <= used[0]["allocated"] + ALLOCATED_SLACK_MIB, used
        assert after["device_used"] <= used[0]["device_used"] + DEVICE_USED_SLACK_MIB, used
