"""Quality of the 4-bit paths on CPU, on the embedded SmolLM2-135M-Instruct (a real trained
model) and a fixed English text (Python's language reference: benchmarks/common/
perplexity_text.txt, 2,733 tokens with SmolLM2's tokenizer):

(a) its Q4_1 GGUF weights run through the quantized layers vs the same weights
    dequantized to float32: perplexity (the 4-bit path itself must lose nothing: <= 0.5%);
(b) online 4-bit (quantization="4bit": round to nearest, then for asymmetric groups the
    least-squares refit of layers/quantization/rtn.py, and without it; groups of 64 since
    128 does not divide its hidden size 576, and of 32) of the model in bf16 (the
    dequantized weights rounded to bf16) vs that bf16 model: the perplexity increase,
    asymmetric (the default) and symmetric. Caveat: the only trained model here already
    went through 4-bit (Q4_1, groups of 32) once; there is no other.
(c) online FP8 (quantization="fp8": E4M3 weights, a scale per output channel) of the
    same bf16 model vs that model: weights alone (the CPU's forward), and with the
    activations rounded to FP8 per token too (torch._scaled_mm: what CUDA 8.9+ runs).
(d) an FP8 KV cache (kv_cache_dtype="fp8": E4M3, scale 1.0) under the same bf16 model,
    every key and value read back from it, vs a float32 cache; then with FP8 weights and
    activations too; and the largest |key| or |value| cached (E4M3 saturates at 448).

    python -m benchmarks.cpu.quantization_quality --out benchmarks/results/cpu
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from benchmarks.common.model_logits import (dequantize_layers, kv_abs_max, load, perplexity,
                                            quantize_layers, quantize_layers_fp8)

GROUP_SIZE = 64
TEXT = Path(__file__).resolve().parent.parent / "common" / "perplexity_text.txt"


def text_ids(model_dir: str, limit: int | None = None) -> list[int]:
    from transformers import AutoTokenizer
    ids = AutoTokenizer.from_pretrained(model_dir)(TEXT.read_text()).input_ids
    return ids[:limit] if limit else ids


def round_to_bf16(model: torch.nn.Module) -> torch.nn.Module:
    """Every float weight rounded to bf16 (computed on in fp32: CPU bf16 matmuls would
    add their own rounding to the comparison)."""
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point():
                p.copy_(p.to(torch.bfloat16).float())
    return model


def measure(model_dir: str, limit: int | None = None) -> dict:
    ids = text_ids(model_dir, limit)
    quantized = load(model_dir)
    num_quantized = sum(getattr(m, "quant_method", None) is not None
                        for m in quantized.modules())
    ppl_q41 = perplexity(quantized, ids)
    float_model = dequantize_layers(quantized)
    ppl_fp32 = perplexity(float_model, ids)
    bf16 = round_to_bf16(float_model)
    ppl_bf16 = perplexity(bf16, ids)
    state = {k: v.clone() for k, v in bf16.state_dict().items()}
    online = {}
    from kubellm.runtime.layers.quantization import linear_method
    refit = linear_method.REFIT_ROUNDS
    for group, symmetric, rounds in ((GROUP_SIZE, False, refit), (GROUP_SIZE, False, 0),
                                     (GROUP_SIZE, True, refit), (32, False, refit)):
        bf16.load_state_dict(state)
        linear_method.REFIT_ROUNDS = rounds   # 0: the min-max grid alone, as before s21
        model = quantize_layers(bf16, group, symmetric)
        linear_method.REFIT_ROUNDS = refit
        key = f"{'symmetric' if symmetric else 'asymmetric'}_group{group}"
        online[key if rounds or symmetric else key + "_no_refit"] = round(
            perplexity(model, ids), 4)
        dequantize_layers(model)
    fp8 = {}
    for key, activations in (("weights", False), ("weights_and_activations", True)):
        bf16.load_state_dict(state)
        model = quantize_layers_fp8(bf16, activations)
        fp8[key] = round(perplexity(model, ids), 4)
        dequantize_layers(model)
    bf16.load_state_dict(state)
    ppl_bf16_fp32_cache = perplexity(bf16, ids)
    abs_max = kv_abs_max(bf16)
    kv = {"kv_fp8": perplexity(bf16, ids, torch.float8_e4m3fn)}
    model = quantize_layers_fp8(bf16, activations=True)
    kv["weights_activations_and_kv_fp8"] = perplexity(model, ids, torch.float8_e4m3fn)
    dequantize_layers(model)
    return {
        "tokens": len(ids), "quantized_linears": num_quantized,
        "a_gguf_q41": {"ppl_quantized_path": round(ppl_q41, 4),
                       "ppl_dequantized_fp32": round(ppl_fp32, 4),
                       "relative_difference": round(ppl_q41 / ppl_fp32 - 1, 6)},
        "b_online_4bit": {
            "ppl_bf16": round(ppl_bf16, 4),
            **{f"ppl_4bit_{k}": v for k, v in online.items()},
            **{f"increase_{k}": round(v / ppl_bf16 - 1, 5) for k, v in online.items()}},
        "c_online_fp8": {
            "ppl_bf16": round(ppl_bf16, 4),
            **{f"ppl_fp8_{k}": v for k, v in fp8.items()},
            **{f"increase_{k}": round(v / ppl_bf16 - 1, 5) for k, v in fp8.items()}},
        "d_fp8_kv_cache": {
            "ppl_bf16": round(ppl_bf16_fp32_cache, 4), "kv_abs_max": round(abs_max, 3),
            **{f"ppl_{k}": round(v, 4) for k, v in kv.items()},
            **{f"increase_{k}": round(v / ppl_bf16_fp32_cache - 1, 5) for k, v in kv.items()}},
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--limit", type=int, default=None, help="first N tokens of the text")
    args = ap.parse_args()
    from kubellm.runtime.loading.default_model import default_model_path
    result = measure(default_model_path(), args.limit)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "quantization_quality.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
