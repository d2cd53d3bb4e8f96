"""Mixture-of-experts engines on a CUDA GPU in bf16 (run on the H200 by run_all.sh):
greedy tokens against transformers on random checkpoints of real shapes with fewer layers (Qwen3-30B-A3B: 128 experts, top-8; Mixtral-8x7B: 8 experts,
top-2), with CUDA graphs and without.

The rule is teacher-forced (agreement.teacher_forced_gaps): transformers reads our greedy
tokens, and each token's logit must lie within ``MAX_GAP_STD`` std of transformers' best,
with the median prompt's largest gap within ``MEDIAN_GAP_STD``.

Why not tighter: bf16 alone moves MoE tokens more than dense ones. A router's 2nd and 3rd
expert logits are often 1/32 apart, one bf16 step, so summation order flips which experts
a token takes.
- Mixtral on the H200 (Triton kernels): 11 prompts within 0.47 std, one at 1.33; the
  free-running top-5 rule broke there.
- The same prompts on the CPU, in bf16 without any Triton kernel
  (benchmarks/cpu/moe_bf16_gaps.py): up to 1.85 std, median 0.13, router margin 1/32.

A wrong model's tokens sit where random tokens do, ~4 std below the best at every
position, so both bounds still catch it."""
from __future__ import annotations

import pytest
import torch

from benchmarks.common.moe_agreement import check_agreement, random_checkpoint
from benchmarks.common.shapes import MIXTRAL_8X7B, QWEN3_30B_A3B

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip(reason="needs a CUDA GPU", allow_module_level=True)

MAX_GAP_STD = 2.5
MEDIAN_GAP_STD = 0.5


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    made = {}

    def get(name):
        if name not in made:
            shape, layers = {"qwen3-30b-a3b": (QWEN3_30B_A3B, 4),
                             "mixtral-8x7b": (MIXTRAL_8X7B, 2)}[name]
            made[name] = random_checkpoint(shape, tmp_path_factory.mktemp(name), layers,
                                           "cuda", torch.bfloat16)
        return made[name]
    return get


@pytest.mark.parametrize("shape", ["qwen3-30b-a3b", "mixtral-8x7b"])
@pytest.mark.parametrize("enforce_eager", [False, True], ids=["graphs", "eager"])
def test_bf16_greedy_tokens_agree_with_transformers(checkpoints, shape, enforce_eager):
    path, hf = checkpoints(shape)
    vocab = hf.config.vocab_size
    result = check_agreement(path, hf, "cuda", vocab_high=vocab - 16, max_model_len=2048,
                             max_num_seqs=16, enforce_eager=enforce_eager,
                             gpu_memory_utilization=0.5)
    assert result["backend"] == "triton" and result["cuda_graphs"] == (not enforce_eager)
    print(f"{shape} eager={enforce_eager}: largest gap per prompt (std) {result['gaps_std']}, "
          f"top-5 rule {result['failures'] or 'held'}")
    gaps = sorted(result["gaps_std"])
    assert gaps[-1] <= MAX_GAP_STD, (result["gaps_std"], result["failures"])
    assert gaps[len(gaps) // 2] <= MEDIAN_GAP_STD, (result["gaps_std"], result["failures"])
