"""A GGUF file (llama.cpp's format) as a checkpoint: Hugging Face tensor names, quantized
linears kept quantized, everything else as float.

Linears of a quantized type come out as ``QuantizedWeight`` (gguf_blocks.py), any other
tensor as float32. llama-architecture converters permute the rows of q and k for
llama.cpp's rotary layout; whole rows move, so the permutation is undone on the
quantized weight's output columns without touching a value.
"""
from __future__ import annotations

import re
from functools import cached_property
from pathlib import Path

import torch

from kubellm.runtime.layers.quantization.spec import LinearQuantSpec
from kubellm.runtime.loading.quantized.gguf_blocks import (
    FLOAT_TYPES, QUANTIZED_TYPES, float_tensor, quantized_weight,
)

_GLOBAL = {"token_embd.weight": "model.embed_tokens.weight",
           "output_norm.weight": "model.norm.weight", "output.weight": "lm_head.weight"}
_BLOCK = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
          "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
          "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
          "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
          "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
_LINEARS = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"}
_BLOCK_NAME = re.compile(r"^blk\.(\d+)\.([a-z_]+)\.(weight|bias)$")


def find_gguf(path: str) -> Path | None:
    """The GGUF file ``path`` names, or the only one in the directory ``path``."""
    p = Path(path)
    if p.is_file() and p.suffix == ".gguf":
        return p
    if p.is_dir():
        found = sorted(p.glob("*.gguf"))
        if len(found) > 1:
            raise ValueError(f"{path} holds several GGUF files ({', '.join(f.name for f in found)}); "
                             f"name one")
        return found[0] if found else None
    return None


def hf_name(gguf_name: str) -> tuple[str, bool] | None:
    """(Hugging Face tensor name, is a linear's weight), or None for tensors we skip."""
    if gguf_name in _GLOBAL:
        return _GLOBAL[gguf_name], False
    m = _BLOCK_NAME.match(gguf_name)
    if not m or m[2] not in _BLOCK:
        return None
    return f"model.layers.{m[1]}.{_BLOCK[m[2]]}.{m[3]}", m[2] in _LINEARS and m[3] == "weight"


class GGUFCheckpoint:
    def __init__(self, path: Path):
        import gguf
        self.path = path
        self.reader = gguf.GGUFReader(str(path))

    def field(self, key: str, default=None):
        f = self.reader.fields.get(key)
        return f.contents() if f is not None else default

    @cached_property
    def architecture(self) -> str:
        return self.field("general.architecture", "llama")

    def _heads(self, name: str) -> int | None:
        """Heads whose rows llama.cpp's converter permuted in this tensor, if any."""
        if self.architecture != "llama":
            return None
        arch = self.architecture
        if name.endswith("self_attn.q_proj.weight") or name.endswith("self_attn.q_proj.bias"):
            return self.field(f"{arch}.attention.head_count")
        if name.endswith("self_attn.k_proj.weight") or name.endswith("self_attn.k_proj.bias"):
            return self.field(f"{arch}.attention.head_count_kv") or \
                self.field(f"{arch}.attention.head_count")
        return None

    def linear_types(self) -> dict[str, str]:
        """Hugging Face linear weight name -> its GGUF type name."""
        out = {}
        for t in self.reader.tensors:
            mapped = hf_name(t.name)
            if mapped and mapped[1]:
                out[mapped[0]] = t.tensor_type.name
        return out

    def specs(self) -> dict[str, LinearQuantSpec]:
        """Hugging Face linear weight name -> spec, for the linears stored quantized."""
        specs = {}
        for name, kind in self.linear_types().items():
            if kind in QUANTIZED_TYPES:
                bits, group = QUANTIZED_TYPES[kind]
                specs[name] = LinearQuantSpec(bits, group)
            elif kind not in FLOAT_TYPES:
                raise ValueError(f"{self.path.name}: tensor {name} has GGUF type {kind}, "
                                 f"which kubellm cannot read; supported: "
                                 f"{', '.join((*QUANTIZED_TYPES, *FLOAT_TYPES))}")
        return specs

    def tensors(self, wanted=lambda name: True):
        """(Hugging Face name, QuantizedWeight or float32 tensor) for the tensors ``wanted``
        keeps, one at a time."""
        for t in self.reader.tensors:
            mapped = hf_name(t.name)
            if mapped is None or not wanted(mapped[0]):
                continue
            name, is_linear = mapped
            kind = t.tensor_type.name
            shape = tuple(int(n) for n in reversed(t.shape))
            if is_linear and kind in QUANTIZED_TYPES:
                value = quantized_weight(t.data, kind, *shape)
            else:
                value = float_tensor(t.data, kind, shape)
            heads = self._heads(name)
            if heads:
                order = _unpermute_order(shape[0], heads)
                value = value.permute_columns(order) if is_linear and kind in QUANTIZED_TYPES \
                    else value[order]
            yield name, value


def _unpermute_order(rows: int, heads: int) -> torch.Tensor:
    """Row order that undoes convert_hf_to_gguf's q/k permutation: within each head the
    converter interleaved the two rotary halves; row (h, i, j) of the Hugging Face layout
    [heads, 2, half] sits at (h, j, i) of the file's [heads, half, 2]."""
    half = rows // heads // 2
    return torch.arange(rows).view(heads, half, 2).transpose(1, 2).reshape(rows)
