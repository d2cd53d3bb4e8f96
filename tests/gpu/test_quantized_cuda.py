"""4-bit weights on a CUDA GPU (run by STAGES=w4a16 / tests on the H200): the engine with
quantization="4bit" (Triton W4A16 GEMM, CUDA graphs and eager) against transformers in bf16
holding the dequantized weights of the very same 4-bit layers.

The rule is teacher-forced: transformers reads the prompt and our 16 greedy tokens in one
pass, and at every position our token's logit must lie within ``MAX_GAP_STD`` standard
deviations (of that position's logits) of transformers' best. Both sides hold the same
bf16 weights, so only the summation order differs; on these random 4-layer models the top
logits are close (top-1 to top-6 spans 0.1-1.3 std) and that noise moved our token up to
0.12 std below transformers' best on the H200 (rank <= 4), which broke the free-running
top-5 rule once in 192 positions. A wrong weight (group, packing, scale) puts our token
where a random one sits, ~4-5 std below the best.

These engine tests run the default W4A16 kernel, whose decode calls sum their K splits in
the persistent workspace (w4a16_gemm.py) inside the engine's CUDA graphs; the first test
checks that kernel alone in graphs: replays right at 1-64 rows, the workspace left zero."""
from __future__ import annotations

import random

import pytest
import torch

from benchmarks.common.agreement import teacher_forced_gaps
from benchmarks.common.shapes import LLAMA3_8B, write_config

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip(reason="needs a CUDA GPU", allow_module_level=True)

MAX_TOKENS = 16
MAX_GAP_STD = 0.5


def _checkpoint(tmp_path, layers=4):
    from transformers import AutoConfig, AutoModelForCausalLM
    path = write_config(LLAMA3_8B, tmp_path / "cfg", num_hidden_layers=layers,
                        initializer_range=0.05)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path),
                                                 dtype=torch.bfloat16)
    model.save_pretrained(tmp_path / "ckpt")
    return str(tmp_path / "ckpt"), model.eval()


def _dequantized_state(ours) -> dict[str, torch.Tensor]:
    """Hugging Face weight names -> our 4-bit (or FP8) layers' weights, dequantized."""
    from kubellm.kernels.quant_layout import dequantize
    args = ours.args
    q, kv = args.num_heads * args.head_dim, args.num_kv_heads * args.head_dim
    state = {}

    from kubellm.runtime.layers.quantization import fp8

    def weight(m):
        if isinstance(m.quant_method, fp8.Fp8LinearMethod):
            return fp8.dequantize_rows(m.weight_fp8, m.weight_scale, torch.float32)
        spec = m.quant_method.spec
        return dequantize(m.qweight, m.scales, m.biases, spec.group_size, spec.bits,
                          m.g_idx).t()
    for i, layer in ours.layers.items():
        attn, mlp = layer.self_attn, layer.mlp
        wq, wk, wv = weight(attn.qkv_proj).split([q, kv, kv])
        gate, up = weight(mlp.gate_up_proj).chunk(2)
        for name, w in (("self_attn.q_proj", wq), ("self_attn.k_proj", wk),
                        ("self_attn.v_proj", wv), ("self_attn.o_proj", weight(attn.o_proj)),
                        ("mlp.gate_proj", gate), ("mlp.up_proj", up),
                        ("mlp.down_proj", weight(mlp.down_proj))):
            state[f"model.layers.{i}.{name}.weight"] = w.to(torch.bfloat16)
    if ours.lm_head is not None and ours.lm_head.quant_method is not None:   # quantize_lm_head
        state["lm_head.weight"] = weight(ours.lm_head)[:args.vocab_size].to(torch.bfloat16)
    return state


def test_w4a16_decode_gemm_in_cuda_graphs_leaves_its_workspace_zero():
    """One eager call per batch size (as the engine warms up; it allocates N's workspace),
    then 1, 4, 16, 40 and 64 rows captured in one graph and replayed on new inputs: each
    replay matches the reference and leaves the workspace and counts zero. A first call
    with another N during capture raises instead of allocating in the graph's pool."""
    from kubellm.kernels import w4a16_gemm as gemm
    from kubellm.kernels.quant_layout import pack_codes
    k, n, group = 4096, 6144, 128
    gen = torch.Generator().manual_seed(0)
    scales = (torch.rand(k // group, n, generator=gen) * 0.004 + 0.001).cuda().bfloat16()
    w = {"qweight": pack_codes(torch.randint(0, 16, (k, n), generator=gen), 4).cuda(),
         "scales": scales, "biases": -8 * scales, "group_size": group}
    other = dict(w, qweight=w["qweight"][:, :1000], scales=scales[:, :1000],
                 biases=w["biases"][:, :1000])
    xs = {m: torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for m in (1, 4, 16, 40, 64)}
    for x in xs.values():
        gemm.w4a16_gemm(x, **w)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = {m: gemm.w4a16_gemm(x, **w) for m, x in xs.items()}
    from kubellm.kernels import split_k
    ws, counts = split_k._WORKSPACES[(torch.device("cuda", torch.cuda.current_device()), n,
                                     split_k.MAX_M)]
    for _ in range(3):
        for x in xs.values():
            x.normal_()
        graph.replay()
        torch.cuda.synchronize()
        for m, x in xs.items():
            torch.testing.assert_close(outs[m], gemm.w4a16_gemm_ref(x, **w),
                                       atol=2e-2, rtol=2e-2)
        assert not ws.any() and not counts.any()
    with pytest.raises(RuntimeError, match="N=1000 .* during CUDA graph capture"), \
            torch.cuda.graph(torch.cuda.CUDAGraph()):
        gemm.w4a16_gemm(xs[1], **w)
        gemm.w4a16_gemm(xs[1], **other)


# "graphs-24": 24 prompts decode at 17-24 rows, where w4a16_gemm's default is gemm-tc
@pytest.mark.parametrize("enforce_eager, quantize_lm_head, switches, prompts",
                         [(False, False, "", 12), (True, False, "", 12), (False, True, "", 12),
                          (False, False, "w4a16_tinygemm", 12), (False, False, "", 24)],
                         ids=["graphs", "eager", "graphs-4bit-head", "graphs-tinygemm",
                              "graphs-24"])
def test_4bit_greedy_tokens_are_transformers_best_on_the_same_weights(
        enforce_eager, quantize_lm_head, switches, prompts, tmp_path, make_llm):
    path, hf = _checkpoint(tmp_path)
    llm = make_llm(path, skip_tokenizer_init=True, max_model_len=2048, max_num_seqs=32,
                   enforce_eager=enforce_eager, gpu_memory_utilization=0.5,
                   quantization="4bit", quantize_lm_head=quantize_lm_head,
                   kernel_switches=switches)
    if switches:   # every 4-bit linear took tinygemm's copy (calls of <= 4 rows)
        linears = [m for m in llm.engine.executor.model.modules()
                   if getattr(m, "quant_method", None) is not None]
        assert linears and all(getattr(m, "tinygemm", None) is not None for m in linears)
    loaded = hf.load_state_dict(_dequantized_state(llm.engine.executor.model), strict=False)
    assert not loaded.unexpected_keys, loaded.unexpected_keys
    assert not [k for k in loaded.missing_keys if "proj" in k], loaded.missing_keys
    failures = _greedy_steps_far_from_transformers(llm, hf, MAX_GAP_STD, prompts)
    assert not failures, failures


def _greedy_steps_far_from_transformers(llm, hf, max_gap_std: float,
                                        count: int = 12) -> list[str]:
    """Greedy outputs of ``count`` random prompts; each step where our token is more than
    ``max_gap_std`` standard deviations below transformers' best logit on the same prefix."""
    from kubellm.runtime import SamplingParams
    rng = random.Random(0)
    prompts = [[rng.randrange(1000, 100000) for _ in range(rng.randint(5, 300))]
               for _ in range(count)]
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=MAX_TOKENS,
                                                ignore_eos=True))
    failures = []
    for i, (p, o) in enumerate(zip(prompts, outs)):
        ours = o.outputs[0].token_ids
        assert len(ours) == MAX_TOKENS
        gaps = teacher_forced_gaps(hf, p, ours, "cuda")
        worst = int(gaps.argmax())
        if gaps[worst] > max_gap_std:
            failures.append(f"prompt {i} step {worst}: our token {ours[worst]} is "
                            f"{gaps[worst]:.2f} std below transformers' best")
    return failures


# FP8 rounds the activations too (per token, before torch._scaled_mm), so transformers
# rounds every projection's input alike (_round_linear_inputs_to_fp8). Without that, the
# H200 (2026-12-02 call 17) put our token 1.6-1.8 std below transformers' best at 4 of
# the 12 prompts. The rounding itself still flips near-ties that summation order decides
# (an E4M3 step is 1/16 of the value): a looser rule than 4-bit's, still far from the
# 4-5 std where a wrong weight or scale puts our token.
FP8_MAX_GAP_STD = 1.5


def _round_linear_inputs_to_fp8(hf) -> None:
    """Each q/k/v/o/gate/up/down projection of ``hf`` sees its input as the FP8 path
    does: rounded to E4M3 with one scale per token (fp8.quantize_activations)."""
    from kubellm.runtime.layers.quantization import fp8

    def round_input(module, inputs):
        x = inputs[0]
        codes, scales = fp8.quantize_activations(x.reshape(-1, x.shape[-1]))
        return ((codes.float() * scales).to(x.dtype).reshape(x.shape),)
    hooked = [m.register_forward_pre_hook(round_input) for name, m in hf.named_modules()
              if name.endswith("_proj")]
    assert len(hooked) == 7 * hf.config.num_hidden_layers


def test_fp8_linear_on_cuda_takes_scaled_mm_and_matches_the_dequantized_weights():
    from kubellm.runtime.layers.quantization import fp8
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip(reason="FP8 tensor cores need compute capability 8.9+")
    assert fp8.scaled_mm_runs_on(torch.device("cuda"))
    torch.manual_seed(0)
    for m, k, n in ((1, 4096, 6144), (64, 4096, 4096), (300, 14336, 4096)):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        codes, scales = fp8.quantize_rows(torch.randn(n, k, device="cuda") * 0.02)
        fast = fp8.fp8_linear(x, codes, scales, use_scaled_mm=True)
        exact = fp8.fp8_linear(x, codes, scales, use_scaled_mm=False)
        assert fast.dtype == torch.bfloat16 and fast.shape == (m, n)
        assert float((fast.float() - exact.float()).norm() / exact.float().norm()) < 0.05


@pytest.mark.parametrize("enforce_eager", [False, True], ids=["graphs", "eager"])
def test_fp8_greedy_tokens_are_near_transformers_best_on_the_same_weights(
        enforce_eager, tmp_path, make_llm):
    path, hf = _checkpoint(tmp_path)
    llm = make_llm(path, skip_tokenizer_init=True, max_model_len=2048, max_num_seqs=16,
                   enforce_eager=enforce_eager, gpu_memory_utilization=0.5,
                   quantization="fp8")
    loaded = hf.load_state_dict(_dequantized_state(llm.engine.executor.model), strict=False)
    assert not [k for k in loaded.missing_keys if "proj" in k], loaded.missing_keys
    expected = torch.cuda.get_device_capability() >= (8, 9)
    if expected:   # the activations go through FP8 only on the torch._scaled_mm path
        _round_linear_inputs_to_fp8(hf)
    failures = _greedy_steps_far_from_transformers(llm, hf, FP8_MAX_GAP_STD)
    linears = [m for m in llm.engine.executor.model.modules()
               if getattr(m, "quant_method", None) is not None]
    assert linears and all(m.fp8_scaled_mm is expected for m in linears)
    assert not failures, failures


def test_fp8_quant_kernel_switch_gives_the_same_tokens(tmp_path, make_llm):
    """The fp8_quant_kernel switch rounds each FP8 linear's input in one Triton kernel
    with codes equal to torch's (tests/kernels/test_fp8_quant.py): the same greedy tokens,
    in CUDA graphs."""
    from kubellm.runtime import SamplingParams
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip(reason="the FP8 x FP8 path needs compute capability 8.9+")
    path, _ = _checkpoint(tmp_path)
    rng = random.Random(1)
    prompts = [[rng.randrange(1000, 100000) for _ in range(rng.randint(5, 300))]
               for _ in range(8)]
    tokens = {}
    for switches in ("fp8_quant_kernel=off", "fp8_quant_kernel=on"):
        llm = make_llm(path, skip_tokenizer_init=True, max_model_len=2048, max_num_seqs=16,
                       gpu_memory_utilization=0.5, quantization="fp8",
                       kernel_switches=switches)
        outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=MAX_TOKENS,
                                                    ignore_eos=True))
        tokens[switches] = [o.outputs[0].token_ids for o in outs]
        llm.shutdown()
    assert tokens["fp8_quant_kernel=off"] == tokens["fp8_quant_kernel=on"]
