"""Our router against transformers' routers of each family on the same weights: the same
experts and the same weights for every token (ties aside: random fp32 inputs have none)."""
from __future__ import annotations

import pytest
import torch

from kubellm.runtime.layers.moe_router import RouterSpec, TopKRouter

HIDDEN, TOKENS = 32, 50


def _hf_router(family: str):
    import transformers
    common = dict(hidden_size=HIDDEN, num_hidden_layers=1, num_attention_heads=4,
                  num_key_value_heads=2, intermediate_size=64, vocab_size=100)
    if family == "mixtral":
        from transformers.models.mixtral.modeling_mixtral import MixtralTopKRouter
        cfg = transformers.MixtralConfig(**common, num_local_experts=8, num_experts_per_tok=2)
        return MixtralTopKRouter(cfg), RouterSpec(top_k=2)
    if family.startswith("qwen"):
        from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeTopKRouter
        norm = family == "qwen-norm"
        cfg = transformers.Qwen2MoeConfig(**common, num_experts=16, num_experts_per_tok=8,
                                          moe_intermediate_size=16, norm_topk_prob=norm)
        return Qwen2MoeTopKRouter(cfg), RouterSpec(top_k=8, renormalize=norm,
                                                   round_weights=True)
    from transformers.models.dots1.modeling_dots1 import Dots1TopkRouter
    cfg = transformers.Dots1Config(**common, n_routed_experts=16, num_experts_per_tok=4,
                                   n_group=4, topk_group=2, norm_topk_prob=True,
                                   routed_scaling_factor=2.5, moe_intermediate_size=16)
    spec = RouterSpec(top_k=4, scoring="sigmoid", num_groups=4, topk_groups=2,
                      routed_scaling_factor=2.5, correction_bias=True, fp32=True)
    return Dots1TopkRouter(cfg), spec


@pytest.mark.parametrize("family", ["mixtral", "qwen", "qwen-norm", "dots1"])
def test_same_experts_and_weights_as_transformers(family):
    torch.manual_seed(0)
    hf, spec = _hf_router(family)
    with torch.no_grad():
        hf.weight.normal_(0, 0.5)
        if hasattr(hf, "e_score_correction_bias"):
            hf.e_score_correction_bias.normal_(0, 0.3)   # steers the choice, not the weight
    ours = TopKRouter(HIDDEN, hf.weight.shape[0], spec)
    with torch.no_grad():
        ours.weight.copy_(hf.weight)
        if ours.e_score_correction_bias is not None:
            ours.e_score_correction_bias.copy_(hf.e_score_correction_bias)
    x = torch.randn(TOKENS, HIDDEN)
    _, hf_weights, hf_ids = hf(x)
    weights, ids = ours(x)
    order, hf_order = ids.sort(-1).indices, hf_ids.sort(-1).indices
    assert torch.equal(ids.gather(1, order), hf_ids.gather(1, hf_order))
    torch.testing.assert_close(weights.gather(1, order),
                               hf_weights.float().gather(1, hf_order), atol=1e-6, rtol=1e-6)
    if family == "dots1":   # the choice really was limited to 2 of the 4 groups
        assert ((ids // 4).unique(dim=None).numel() > 2)
        assert all(len(set((row // 4).tolist())) <= 2 for row in ids)


@pytest.mark.parametrize("spec, message", [
    (RouterSpec(top_k=9), "num_experts_per_tok=9 must be between 1 and the 8 experts"),
    (RouterSpec(top_k=2, scoring="relu"), "scoring_func must be one of softmax, sigmoid"),
    (RouterSpec(top_k=2, num_groups=3), "n_group=3 must divide the 8 experts"),
    (RouterSpec(top_k=2, num_groups=4, topk_groups=5), "topk_group=5 must be between 1"),
    (RouterSpec(top_k=6, num_groups=4, topk_groups=2), "hold fewer than num_experts_per_tok=6"),
])
def test_bad_router_configs_name_the_field(spec, message):
    with pytest.raises(ValueError, match=message):
        TopKRouter(HIDDEN, 8, spec)


@pytest.mark.parametrize("spec", [RouterSpec(top_k=2), RouterSpec(top_k=4, renormalize=False,
                                                                   round_weights=True)])
def test_fused_softmax_router_kernel_agrees_with_torch(spec):
    """On CUDA a softmax router runs as one Triton kernel (interpreted here)."""
    torch.manual_seed(1)
    router = TopKRouter(HIDDEN, 16, spec)
    with torch.no_grad():
        router.weight.normal_(0, 0.5)
    x = torch.randn(TOKENS, HIDDEN)
    weights, ids = router(x)
    router.use_triton = True
    fused_weights, fused_ids = router(x)
    assert fused_ids.dtype == torch.int32 and torch.equal(fused_ids.long(), ids)
    torch.testing.assert_close(fused_weights, weights, atol=1e-6, rtol=1e-6)
