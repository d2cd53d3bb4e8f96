"""Quality of the 4-bit paths on CPU, on the embedded SmolLM2-135M-Instruct (a real trained
model) and a fixed English text (Python's language reference: benchmarks/common/
perplexity_text.txt, 2,733 tokens with SmolLM2's tokenizer):

(a) its Q4_1 GGUF weights run through the quantized layers vs the same weights
    dequantized to float32: perplexity (the 4-bit path itself must lose nothing: <= 0.5%);
(b) online 4-bit (quantization="4bit": round to nearest, then for asymmetric groups the
    least-squares refit of layers/quantization/rtn.py, and without it; groups of 64 since
    128 does not divide its hidden size 576, and of 32) of the model in bf16 (the
    dequantized weights rounded to bf16) vs that bf16 model: the perplexity increase,
    asymmetric (the default) and symmetric. Caveat: this model already went through
    4-bit (Q4_1, groups of 32) once; --float-model (below) measures one that did not.
(c) online FP8 (quantization="fp8": E4M3 weights, a scale per output channel) of the
    same bf16 model vs that model: weights alone (the CPU's forward), and with the
    activations rounded to FP8 per token too (torch._scaled_mm: what CUDA 8.9+ runs).
(d) an FP8 KV cache (kv_cache_dtype="fp8": E4M3, scale 1.0) under the same bf16 model,
    every key and value read back from it, vs a float32 cache; then with FP8 weights and
    activations too; and the largest |key| or |value| cached (E4M3 saturates at 448).

``--float-model DIR`` measures (b), (c) and the FP8 cache of (d) instead on a bf16
checkpoint that never went through 4-bit: the small Llama that
benchmarks/cpu/train_float_model.py trains on this machine (the stdlib's source; 4.2M
parameters, groups of 128 fit its layers). Perplexity over
windows of its training length (256 tokens) on two texts: the fixed English text above
(prose, out of its domain) and the first 8,192 held-out tokens of its own corpus (code);
transformers' perplexity on the same checkpoint and windows is the reference that our
float path must match.

    python -m benchmarks.cpu.quantization_quality --out benchmarks/results/cpu
    python -m benchmarks.cpu.quantization_quality --float-model /tmp/float-llama \
        --out benchmarks/results/cpu
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from benchmarks.common.model_logits import (dequantize_layers, kv_abs_max, load, perplexity,
                                            quantize_layers, quantize_layers_fp8,
                                            windowed_perplexity)

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


FLOAT_WINDOW = 256          # train_float_model's sequence length
FLOAT_HELD_OUT_TOKENS = 8192


def measure_float(model_dir: str, tokens: int | None = None) -> dict:
    """Online 4-bit and FP8 of a float checkpoint that never went through 4-bit, against
    it, on the fixed prose and on held-out code (train_float_model's corpus); ``tokens``:
    the first that many of each text alone."""
    from transformers import AutoTokenizer, LlamaForCausalLM

    from benchmarks.cpu.train_float_model import split_corpus
    from kubellm.runtime.layers.quantization import linear_method
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    held_out = tokenizer(split_corpus()[1][:FLOAT_HELD_OUT_TOKENS * 8]).input_ids
    texts = {"prose": tokenizer(TEXT.read_text()).input_ids[:tokens],
             "held_out_code": held_out[:min(tokens or FLOAT_HELD_OUT_TOKENS,
                                            FLOAT_HELD_OUT_TOKENS)]}
    hf = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    model = load(model_dir)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    refit = linear_method.REFIT_ROUNDS
    result = {"model": model_dir, "window": FLOAT_WINDOW}
    for name, ids in texts.items():
        reference = windowed_perplexity(hf, ids, FLOAT_WINDOW, hf=True)
        row = {"tokens": len(ids), "ppl_transformers_fp32": round(reference, 4)}
        model.load_state_dict(state)
        base = windowed_perplexity(model, ids, FLOAT_WINDOW)   # the ratios' (unrounded)
        row["ppl_bf16"] = round(base, 4)
        for group, symmetric, rounds in ((128, False, refit), (128, False, 0),
                                         (128, True, refit), (64, False, refit),
                                         (32, False, refit)):
            model.load_state_dict(state)
            linear_method.REFIT_ROUNDS = rounds
            try:
                quantized = quantize_layers(model, group, symmetric)
            finally:
                linear_method.REFIT_ROUNDS = refit
            key = f"4bit_{'symmetric' if symmetric else 'asymmetric'}_group{group}" + \
                ("" if rounds or symmetric else "_no_refit")
            ppl = windowed_perplexity(quantized, ids, FLOAT_WINDOW)
            row[f"ppl_{key}"], row[f"increase_{key}"] = round(ppl, 4), round(ppl / base - 1, 5)
            model = dequantize_layers(quantized)
        for key, activations in (("fp8_weights", False), ("fp8_weights_and_activations", True)):
            model.load_state_dict(state)
            quantized = quantize_layers_fp8(model, activations)
            ppl = windowed_perplexity(quantized, ids, FLOAT_WINDOW)
            row[f"ppl_{key}"], row[f"increase_{key}"] = round(ppl, 4), round(ppl / base - 1, 5)
            model = dequantize_layers(quantized)
        # the user's path, `LLM(model, quantization="4bit")`'s loader (groups of 128, the
        # default): the same weights as quantize_layers' first variant
        loaded = load(model_dir, quantization="4bit", quantization_group_size=128)
        row["ppl_4bit_loader"] = round(windowed_perplexity(loaded, ids, FLOAT_WINDOW), 4)
        model.load_state_dict(state)
        ppl = windowed_perplexity(model, ids, FLOAT_WINDOW, kv_dtype=torch.float8_e4m3fn)
        row["ppl_fp8_kv_cache"], row["increase_fp8_kv_cache"] = round(ppl, 4), \
            round(ppl / base - 1, 5)
        result[name] = row
    return result


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--limit", type=int, default=None,
                    help="first N tokens of the text (of each text with --float-model)")
    ap.add_argument("--float-model", default=None,
                    help="a float checkpoint never quantized (train_float_model.py's): "
                         "online 4-bit and FP8 against it, written to "
                         "quantization_quality_float.json")
    args = ap.parse_args()
    if args.float_model:
        result, name = measure_float(args.float_model, args.limit), \
            "quantization_quality_float.json"
    else:
        from kubellm.runtime.loading.default_model import default_model_path
        result, name = measure(default_model_path(), args.limit), "quantization_quality.json"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / name).write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
