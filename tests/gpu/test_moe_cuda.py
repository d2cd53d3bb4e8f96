"""Mixture-of-experts engines on a CUDA GPU in bf16 (run on the H200 by run_all.sh):
greedy tokens against transformers by the top-5 rule on random checkpoints of real
shapes with fewer layers (Qwen3-30B-A3B: 128 experts, top-8; Mixtral-8x7B: 8 experts,
top-2), with CUDA graphs and without.

The rule is teacher-forced (agreement.teacher_forced_gaps): at every position our greedy
token's logit lies within ``MAX_GAP_STD`` std of transformers' best when transformers reads
our tokens. The free-running top-5 rule broke once on Mixtral in bf16 on the H200 (prompt
3, step 3, both with and without graphs): with near-equal router scores, the summation
order of equal weights flips which 2 of 8 experts a token takes, a discrete jump that
bf16 noise triggers; the bound leaves room for such a flip and is still 4x below where a
wrong model's tokens sit (~4-5 std)."""
from __future__ import annotations

import pytest
import torch

from benchmarks.common.moe_agreement import check_agreement, random_checkpoint
from benchmarks.common.shapes import QWEN3_30B_A3B

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip(reason="needs a CUDA GPU", allow_module_level=True)

MAX_GAP_STD = 1.0
MIXTRAL_8X7B = dict(
    architectures=["MixtralForCausalLM"], model_type="mixtral", vocab_size=32000,
    hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
    num_key_value_heads=8, num_local_experts=8, num_experts_per_tok=2,
    max_position_embeddings=32768, rms_norm_eps=1e-5, rope_theta=1000000.0,
    sliding_window=None, tie_word_embeddings=False, torch_dtype="bfloat16")


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
    worst = max(result["gaps_std"])
    assert worst <= MAX_GAP_STD, (result["gaps_std"], result["failures"])
