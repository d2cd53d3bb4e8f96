"""quantization="fp8": a float checkpoint's linears quantized at load to FP8 (E4M3) with a
scale per output channel (layers/quantization/fp8.py), its two forwards, its tensor-parallel
slices, and its startup errors."""
from __future__ import annotations

import random

import pytest
import torch

from benchmarks.common.model_logits import load, prompt_logits
from kubellm.kernels.fp8_quant import per_token_fp8
from kubellm.runtime import LLM, SamplingParams
from kubellm.runtime.config import EngineConfig
from kubellm.runtime.config_sources import ConfigError
from kubellm.runtime.layers.linear import ColumnParallelLinear, RowParallelLinear
from kubellm.runtime.layers.quantization import fp8
from kubellm.runtime.parallel import state as ps

PROMPT = [5, 100, 2000, 7, 9, 11, 300, 42]


def fp8_layers(model) -> list:
    return [m for m in model.modules()
            if isinstance(getattr(m, "quant_method", None), fp8.Fp8LinearMethod)]


def test_rows_round_trip_within_e4m3_precision():
    """Each row's largest magnitude maps to 448, and every weight comes back within
    E4M3's relative step (3 mantissa bits: 2^-4 of its value, rounded to nearest)."""
    w = torch.randn(48, 80) * torch.logspace(-3, 1, 48)[:, None]   # rows of unlike scales
    w[5] = 0.0                                                     # an all-zero row
    codes, scales = fp8.quantize_rows(w)
    assert codes.dtype == torch.float8_e4m3fn and scales.dtype == torch.float32
    assert codes.float().abs().amax(1)[torch.arange(48) != 5].eq(448).all()
    back = fp8.dequantize_rows(codes, scales, torch.float32)
    assert torch.equal(back[5], torch.zeros(80))
    normal = w.abs() >= scales[:, None] * 2 ** -6     # E4M3's normal range
    assert ((back - w).abs() <= w.abs() * 2 ** -4 + 1e-12)[normal].all()


def test_scaled_mm_and_dequantizing_forwards_agree():
    """The FP8 x FP8 forward (torch._scaled_mm, per-token activation scales: what CUDA
    8.9+ runs) against the dequantizing one, on the CPU, which runs both: only the
    activations' own FP8 rounding apart."""
    torch.manual_seed(0)
    x, w = torch.randn(7, 64), torch.randn(32, 64)
    codes, scales = fp8.quantize_rows(w)
    exact = fp8.fp8_linear(x, codes, scales, use_scaled_mm=False)
    torch.testing.assert_close(exact, x @ fp8.dequantize_rows(codes, scales, x.dtype).t())
    fast = fp8.fp8_linear(x, codes, scales, use_scaled_mm=True)
    assert fast.dtype == x.dtype and fast.shape == (7, 32)
    assert (fast - exact).norm() / exact.norm() < 0.05
    assert not torch.equal(fast, exact), "the activations were meant to go through FP8"
    assert not fp8.scaled_mm_runs_on(torch.device("cpu"))


def test_online_fp8_runs_its_dequantized_weights_and_loses_less_than_4bit(tiny_model_dir):
    model = load(tiny_model_dir, quantization="fp8")
    layers = fp8_layers(model)
    assert len(layers) == 2 * 4      # qkv, o, gate_up, down in each of 2 layers
    assert all(layer.weight is None and layer.weight_fp8.dtype == torch.float8_e4m3fn
               for layer in layers)
    assert model.embed_tokens.weight.dtype == torch.float32   # embeddings stay float
    logits = prompt_logits(model, PROMPT)
    for layer in layers:   # the same model on its dequantized weights, no FP8 path
        layer.weight = torch.nn.Parameter(fp8.dequantize_rows(
            layer.weight_fp8, layer.weight_scale, torch.float32), requires_grad=False)
        layer.quant_method = None
    torch.testing.assert_close(logits, prompt_logits(model, PROMPT), atol=1e-5, rtol=1e-5)
    # this random model magnifies any rounding (logits 15% off with FP8, 43% with 4-bit
    # in groups of 32); on a trained one FP8 costs 2.3% of perplexity, 3.5% with FP8
    # activations (benchmarks/cpu/quantization_quality.py)
    reference = prompt_logits(load(tiny_model_dir), PROMPT)
    int4 = prompt_logits(load(tiny_model_dir, quantization="4bit",
                              quantization_group_size=32), PROMPT)
    error = lambda x: float((x - reference).norm() / reference.norm())  # noqa: E731
    assert error(logits) < 0.5 * error(int4), (error(logits), error(int4))


def test_online_fp8_holds_a_quarter_of_the_float_linears_plus_row_scales(tiny_model_dir):
    def linear_bytes(model):
        return sum(p.numel() * p.element_size() for n, p in model.named_parameters()
                   if "proj" in n and not n.endswith("bias"))
    float_model = load(tiny_model_dir)
    rows = sum(p.shape[0] for n, p in float_model.named_parameters()
               if "proj" in n and n.endswith("weight"))
    assert linear_bytes(load(tiny_model_dir, quantization="fp8")) * 4 == \
        linear_bytes(float_model) + 4 * 4 * rows     # fp32 -> 1 byte, + an fp32 scale a row


def test_online_fp8_load_holds_one_float_weight_at_a_time(tiny_model_dir, monkeypatch):
    """As the 4-bit load: each float weight (this rank's slice, read lazily) is
    quantized and freed before the next is read."""
    import weakref
    alive: list[weakref.ref] = []
    real = fp8.quantize_rows

    def watched(weight, scales=None):
        still = [r() for r in alive if r() is not None]
        assert not still, f"{len(still)} float weights still alive when the next is quantized"
        alive.append(weakref.ref(weight))
        return real(weight, scales)
    monkeypatch.setattr(fp8, "quantize_rows", watched)
    load(tiny_model_dir, quantization="fp8")
    assert len(alive) == 2 * 7     # q, k, v, o, gate, up, down of 2 layers
    assert all(r() is None for r in alive)


@pytest.mark.parametrize("kind", ["column", "row"])
def test_tensor_parallel_slices_hold_the_single_process_codes(kind):
    """Two ranks' slices hold the single process's codes and scales, cut like the float
    weight: a column-parallel rank its output rows; a row-parallel rank its input
    columns on the whole rows' scales. The ranks' outputs put together are the single
    process's."""
    torch.manual_seed(1)
    w, x = torch.randn(32, 64), torch.randn(3, 64)
    w[:, 40] *= 30    # one large input feature: its rank's own maxima would differ
    codes_all, scales_all = fp8.quantize_rows(w)
    outs = []
    for rank in range(2):
        with ps.building(ps.ParallelState(tp_size=2, tp_rank=rank)):
            layer = ColumnParallelLinear(64, 32) if kind == "column" else RowParallelLinear(64, 32)
        method = fp8.Fp8LinearMethod()
        method.create_weights(layer, "proj")
        method.load(layer, w)
        if kind == "column":
            rows = slice(16 * rank, 16 * rank + 16)
            codes, scales = codes_all[rows], scales_all[rows]
            outs.append(method.apply(layer, x))
        else:
            codes, scales = codes_all[:, 32 * rank:32 * rank + 32], scales_all
            outs.append(method.apply(layer, x[:, 32 * rank:32 * rank + 32]))
        assert torch.equal(layer.weight_fp8.float(), codes.float())
        assert torch.equal(layer.weight_scale, scales)
    full = torch.cat(outs, dim=1) if kind == "column" else outs[0] + outs[1]
    single = x @ fp8.dequantize_rows(codes_all, scales_all, torch.float32).t()
    torch.testing.assert_close(full, single, atol=1e-5, rtol=1e-5)
    assert (full - x @ w.t()).norm() / (x @ w.t()).norm() < 0.05


def test_engine_generates_from_the_fp8_weights(tiny_model_dir):
    """The engine on quantization="fp8" takes each prompt's first token from the FP8
    model's logits (the loader's model alone, one prefill forward)."""
    rng = random.Random(3)
    prompts = [[rng.randrange(100, 49000) for _ in range(rng.randint(4, 40))]
               for _ in range(6)]
    model = load(tiny_model_dir, quantization="fp8")
    expected = [int(prompt_logits(model, p)[-1].argmax()) for p in prompts]
    llm = LLM(tiny_model_dir, quantization="fp8", num_kv_blocks=64, skip_tokenizer_init=True)
    assert len(fp8_layers(llm.engine.executor.model)) == 2 * 4
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))
    assert [o.outputs[0].token_ids[0] for o in outs] == expected
    assert all(len(o.outputs[0].token_ids) == 4 for o in outs)


# ---- bad settings ------------------------------------------------------------------------
def test_fp8_settings_that_cannot_work_name_the_field(tiny_model_factory):
    from tests.runtime.loading.test_quantized_formats import CHECKPOINTS
    with pytest.raises(ConfigError, match="fp8 quantizes a float checkpoint at load, but "
                                          "this one is already quantized"):
        LLM(str(CHECKPOINTS / "gguf" / "tiny-Q4_1.gguf"), quantization="fp8")
    with pytest.raises(ConfigError, match=r"'quantize_lm_head': applies to "
                                          r"quantization=4bit only"):
        EngineConfig(quantization="fp8", quantize_lm_head=True)
    assert EngineConfig.from_sources(env={"KUBELLM_QUANTIZATION": "fp8"}).quantization == "fp8"


def test_the_fp8_quant_kernel_switch_gives_the_same_tokens(tiny_model_dir):
    """With fp8_quant_kernel every FP8 linear rounds its input in one Triton kernel
    (kernels/fp8_quant.py, Triton's interpreter here) and the greedy tokens of the FP8 x
    FP8 path equal those of torch's five-kernel rounding: the codes are the same."""
    outs = {}
    for switches in ("fp8_quant_kernel=off", "fp8_quant_kernel"):
        llm = LLM(tiny_model_dir, dtype="float32", quantization="fp8",
                  kernel_switches=switches, max_model_len=64, max_num_batched_tokens=64)
        layers = fp8_layers(llm.engine.executor.model)
        for layer in layers:
            layer.fp8_scaled_mm = True     # the CUDA 8.9+ path, which the CPU also runs
        fused = [getattr(getattr(m, "fp8_quantize", None), "func", None) is per_token_fp8
                 for m in layers]
        assert all(fused) if switches == "fp8_quant_kernel" else not any(fused)
        out = llm.generate([PROMPT, PROMPT[:3]], SamplingParams(temperature=0, max_tokens=6,
                                                                ignore_eos=True))
        outs[switches] = [o.outputs[0].token_ids for o in out]
        llm.shutdown()
    assert outs["fp8_quant_kernel=off"] == outs["fp8_quant_kernel"]
