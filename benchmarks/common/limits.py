"""The limit of an offline workload on a dense Llama-shaped model, from the ceilings
measured in the same run (common/ceilings.py), as BENCHMARKS.md defines it for W:

    prefill FLOPs at the matmul rate + decode bytes at the copy rate,

decode bytes being the weights once per decode step for ``max(output_lens)`` steps (every
request decoding in one batch: no scheduler can take fewer steps) plus each sequence's
KV cache once per output token. The copy ceiling counts bytes read + written; decode
only reads, so bytes are divided by it as they are.

That rule takes a decode step as a weight read. Above the matmul/copy ridge (~160 rows
on an H200) a step's GEMMs are compute-bound instead, so ``strict_*`` also counts the
decode GEMMs' FLOPs (2 x parameters x output tokens) at the matmul rate where they take
longer than the weight reads: a floor no engine can beat, and the fairer yardstick for
large batches.
"""
from __future__ import annotations


def model_sizes(shape: dict, itemsize: int = 2) -> dict:
    """Parameters per layer and in the head, KV bytes per token (all layers)."""
    h, ffn, layers = shape["hidden_size"], shape["intermediate_size"], shape["num_hidden_layers"]
    head_dim = shape.get("head_dim") or h // shape["num_attention_heads"]
    q_dim = shape["num_attention_heads"] * head_dim
    kv_dim = shape["num_key_value_heads"] * head_dim
    layer_params = h * (q_dim + 2 * kv_dim) + q_dim * h + 3 * h * ffn
    return {"layers": layers, "layer_params": layer_params,
            "head_params": shape["vocab_size"] * h, "q_dim": q_dim,
            "kv_bytes_per_token": layers * 2 * kv_dim * itemsize, "itemsize": itemsize}


def workload_limit(shape: dict, prompt_lens: list[int], output_lens: list[int],
                   ceilings: dict, itemsize: int = 2) -> dict:
    sizes = model_sizes(shape, itemsize)
    layers = sizes["layers"]
    params = layers * sizes["layer_params"] + sizes["head_params"]
    matmul, copy = ceilings["matmul_tflops"] * 1e12, ceilings["copy_tb_s"] * 1e12
    prompt_tokens, output_tokens = sum(prompt_lens), sum(output_lens)
    # causal attention: QK^T and PV over half the square, per layer
    attn_flops = sum(2 * 2 * layers * sizes["q_dim"] * n * n / 2 for n in prompt_lens)
    prefill_flops = 2 * layers * sizes["layer_params"] * prompt_tokens + attn_flops
    steps = max(output_lens)
    weight_bytes = itemsize * params
    kv_tokens = sum(p * o + o * (o - 1) / 2 for p, o in zip(prompt_lens, output_lens))
    kv_bytes = kv_tokens * sizes["kv_bytes_per_token"]
    decode_bytes = weight_bytes * steps + kv_bytes
    prefill_s = prefill_flops / matmul
    limit_s = prefill_s + decode_bytes / copy
    decode_gemm_flops = 2 * params * output_tokens
    strict_s = prefill_s + max(decode_gemm_flops / matmul, weight_bytes * steps / copy) + \
        kv_bytes / copy
    return {"limit_s": round(limit_s, 3), "limit_output_tok_s": round(output_tokens / limit_s),
            "limit_total_tok_s": round((output_tokens + prompt_tokens) / limit_s),
            "prefill_flops": prefill_flops, "decode_bytes": decode_bytes,
            "prefill_s": round(prefill_s, 3), "decode_steps": steps,
            "decode_gemm_flops": decode_gemm_flops,
            "strict_limit_s": round(strict_s, 3),
            "strict_limit_output_tok_s": round(output_tokens / strict_s)}
