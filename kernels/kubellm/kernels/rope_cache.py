"""The rotary cos/sin table: default inverse frequencies, ``linear`` and ``llama3``
scaling, computed the way ``transformers.modeling_rope_utils`` does (tested against it).

Plain torch with no Triton import, so the engine's CPU path can use it too; the kernel
in ``rotary.py`` and the runtime's RotaryEmbedding both read this table.
"""
import math

import torch


def _inverse_frequencies(head_dim: int, base: float) -> torch.Tensor:
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).to(torch.float32) / head_dim
    return 1.0 / (base ** exponents)


def _llama3_scaled(inv_freq: torch.Tensor, scaling: dict) -> torch.Tensor:
    """Llama 3.1 frequency scaling: long wavelengths divided by `factor`, short ones kept,
    a smooth blend between (the same formula, in the same order, as transformers)."""
    missing = [key for key in ("factor", "low_freq_factor", "high_freq_factor",
                               "original_max_position_embeddings") if key not in scaling]
    if missing:
        raise ValueError(f"llama3 rope_scaling is missing {', '.join(missing)}")
    factor = scaling["factor"]
    low_freq_factor = scaling["low_freq_factor"]
    high_freq_factor = scaling["high_freq_factor"]
    old_context_len = scaling["original_max_position_embeddings"]
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


def build_cos_sin_cache(head_dim: int, max_position: int, base: float,
                        rope_scaling: dict | None = None, device=None) -> torch.Tensor:
    """[max_position, head_dim] fp32: cos of position * inv_freq in the first half, sin in
    the second. `rope_scaling` None or {"rope_type": "default"} -> plain RoPE;
    {"rope_type": "llama3", factor, low_freq_factor, high_freq_factor,
    original_max_position_embeddings} -> Llama 3.1 scaling ("type" is accepted for
    "rope_type", as in older configs)."""
    if head_dim <= 0 or head_dim % 2:
        raise ValueError(f"head_dim must be a positive even number, got {head_dim}")
    if max_position <= 0:
        raise ValueError(f"max_position must be positive, got {max_position}")
    inv_freq = _inverse_frequencies(head_dim, base)
    rope_type = "default"
    if rope_scaling is not None:
        rope_type = rope_scaling.get("rope_type", rope_scaling.get("type", "default"))
    if rope_type == "llama3":
        inv_freq = _llama3_scaled(inv_freq, rope_scaling)
    elif rope_type == "linear":
        inv_freq = inv_freq / rope_scaling["factor"]
    elif rope_type != "default":
        raise ValueError(f"rope_scaling type {rope_type!r} is not supported "
                         "(default, linear, llama3)")
    positions = torch.arange(max_position, dtype=torch.float32)
    freqs = positions[:, None] * inv_freq[None, :]
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1).to(device)
