"""Write a Hugging Face Llama checkpoint as GGUF files with Q4_0 / Q4_1 / Q8_0 / Q4_K
weights using only the `gguf` package (GGUFWriter + gguf.quants), the way llama.cpp's
convert_hf_to_gguf.py does: llama.* metadata, the GPT-2 BPE tokenizer from tokenizer.json,
q/k rows permuted for llama.cpp's rotary layout, 1-D tensors in F32, every 2-D tensor in
the chosen type.

gguf.quants quantizes Q4_0, Q4_1 and Q8_0 byte-identically to llama.cpp (checked on every
tensor of a tiny model); it has no Q4_K quantizer, so quantize_q4_k below writes valid
Q4_K blocks with simple min/max sub-block scales (llama.cpp, gguf and transformers all
read them; llama.cpp's own search picks slightly better scales).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from safetensors.numpy import load_file

QK_K = 256


# ---------------------------------------------------------------- Q4_K (own quantizer)
def quantize_q4_k(x: np.ndarray) -> np.ndarray:
    """float32 [rows, cols] (cols % 256 == 0) -> uint8 [rows, cols // 256 * 144] (block_q4_K).

    block_q4_K = { fp16 d; fp16 dmin; u8 scales[12]; u8 qs[128] }, 8 sub-blocks of 32:
      y[j*64 + l]      = d*sc[2j]   * (qs[j*32+l] & 0xF) - dmin*m[2j]
      y[j*64 + 32 + l] = d*sc[2j+1] * (qs[j*32+l] >> 4)  - dmin*m[2j+1]   (j=0..3, l=0..31)
    scales (6-bit sc/m, ggml get_scale_min_k4):
      j<4 : sc[j] = s[j] & 63,                m[j] = s[j+4] & 63
      j>=4: sc[j] = (s[j+4] & 0xF) | ((s[j-4] >> 6) << 4),  m[j] = (s[j+4] >> 4) | ((s[j] >> 6) << 4)
    """
    rows, cols = x.shape
    assert cols % QK_K == 0
    b = x.astype(np.float32).reshape(-1, 8, 32)              # [nb, sub, 32]
    nb = b.shape[0]
    mn = np.minimum(b.min(-1), 0.0)                          # ggml clamps the min to <= 0
    mx = b.max(-1)
    scale = (mx - mn) / 15.0                                 # per sub-block
    d = (scale.max(-1) / 63.0).astype(np.float16)            # [nb]
    dmin = ((-mn).max(-1) / 63.0).astype(np.float16)
    df, dminf = d.astype(np.float32)[:, None], dmin.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(df > 0, np.rint(scale / df), 0).clip(0, 63).astype(np.uint8)
        m = np.where(dminf > 0, np.rint(-mn / dminf), 0).clip(0, 63).astype(np.uint8)
        eff_s = df * sc                                       # effective scale / min
        eff_m = dminf * m
        q = np.where(eff_s[..., None] > 0, np.rint((b + eff_m[..., None]) / eff_s[..., None]), 0)
    q = q.clip(0, 15).astype(np.uint8)                       # [nb, 8, 32]
    # qs: chunk j (32 bytes) = sub-block 2j in low nibbles, 2j+1 in high nibbles
    qs = (q[:, 0::2, :] | (q[:, 1::2, :] << 4)).reshape(nb, 128)
    s = np.zeros((nb, 12), np.uint8)
    s[:, 0:4] = (sc[:, 0:4] & 63) | ((sc[:, 4:8] >> 4) << 6)
    s[:, 4:8] = (m[:, 0:4] & 63) | ((m[:, 4:8] >> 4) << 6)
    s[:, 8:12] = (sc[:, 4:8] & 0xF) | ((m[:, 4:8] & 0xF) << 4)
    blocks = np.concatenate([d.view(np.uint8).reshape(nb, 2), dmin.view(np.uint8).reshape(nb, 2), s, qs], 1)
    return blocks.reshape(rows, -1)


def quantize(w: np.ndarray, qtype: T) -> np.ndarray:
    if qtype == T.Q4_K:
        return quantize_q4_k(w)
    return gguf.quants.quantize(w, qtype)   # Q4_0 / Q4_1 / Q8_0 / F16 / F32 ...


# ---------------------------------------------------------------- HF -> GGUF
def permute(w: np.ndarray, n_head: int, n_head_kv: int | None) -> np.ndarray:
    """convert_hf_to_gguf.py LlamaModel.permute (HF half-split rotary -> GGUF interleaved)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


NAMES = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
         "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
         "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm",
         "post_attention_layernorm": "ffn_norm"}


def gguf_name(hf: str) -> str:
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    parts = hf.split(".")                     # model.layers.{i}.{a}.{b}.weight
    i = parts[2]
    return f"blk.{i}.{NAMES['.'.join(parts[3:-1])]}.weight"


def write_gguf(hf_dir: Path, out: Path, qtype: T) -> dict:
    cfg = json.loads((hf_dir / "config.json").read_text())
    sd = load_file(str(hf_dir / "model.safetensors"))
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    w = gguf.GGUFWriter(str(out), arch="llama")
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name("tiny-llama")
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_head_count(nh)
    w.add_head_count_kv(nkv)
    w.add_rope_freq_base(float(cfg.get("rope_theta", (cfg.get("rope_parameters") or {}).get("rope_theta", 10000.0))))
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_vocab_size(cfg["vocab_size"])
    w.add_rope_dimension_count(cfg["hidden_size"] // nh)
    ftype = {T.F32: gguf.LlamaFileType.ALL_F32, T.F16: gguf.LlamaFileType.MOSTLY_F16,
             T.Q4_0: gguf.LlamaFileType.MOSTLY_Q4_0, T.Q4_1: gguf.LlamaFileType.MOSTLY_Q4_1,
             T.Q8_0: gguf.LlamaFileType.MOSTLY_Q8_0, T.Q4_K: gguf.LlamaFileType.MOSTLY_Q4_K_M}[qtype]
    w.add_file_type(ftype)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    # tokenizer (GPT-2 BPE from tokenizer.json), as convert_hf_to_gguf does
    vocab = gguf.vocab.BpeVocab(hf_dir)
    tj = json.loads((hf_dir / "tokenizer.json").read_text())
    special = {t["id"] for t in tj.get("added_tokens", []) if t.get("special")}
    toks, types = [], []
    for i, (text, _score, _tt) in enumerate(vocab.all_tokens()):
        toks.append(text if isinstance(text, str) else text.decode("utf-8"))
        types.append(gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(toks)
    w.add_token_types(types)
    sv = gguf.SpecialVocab(hf_dir, load_merges=True, n_vocab=len(toks))
    sv.add_to_gguf(w, quiet=True)
    stats = {}
    for hf, t in sd.items():
        name = gguf_name(hf)
        t = t.astype(np.float32)
        if name.endswith("attn_q.weight"):
            t = permute(t, nh, nh)
        elif name.endswith("attn_k.weight"):
            t = permute(t, nh, nkv)
        if t.ndim == 1 or qtype == T.F32:
            w.add_tensor(name, t)                               # F32
            stats[name] = 0.0
            continue
        data = quantize(t, qtype)
        # numpy shape of a quantized tensor is the byte shape; raw_dtype tells the writer
        w.add_tensor(name, data, raw_shape=data.shape, raw_dtype=qtype)
        back = gguf.quants.dequantize(data, qtype)
        stats[name] = float(np.abs(back - t).max())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return stats


def write_gguf_files(hf_dir: Path, out_dir: Path, type_names: list[str]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in type_names:
        qtype = T[name]
        out = out_dir / f"tiny-{name}.gguf"
        stats = write_gguf(Path(hf_dir), out, qtype)
        print(f"{out.name}: {out.stat().st_size} bytes; "
              f"max |dequant(quant(w)) - w| = {max(stats.values()):.4g}")
