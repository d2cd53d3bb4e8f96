"""Block sizes of ``fused_moe``: a small table measured per batch bucket on the GPU
(``fused_moe_configs.json``, written by ``python -m benchmarks.gpu.moe``), and defaults
that are correct for any shape where the table has no entry.

Table layout: ``{device name: {shape key: {tokens bucket: config}}}`` with the shape key
``E=<local experts>,H=<hidden>,I=<local intermediate>,K=<top-k>,<dtype>``; a step of T
tokens takes the smallest bucket >= T (else the largest). One ``block_m`` serves both
GEMMs (they share the sorted layout); each GEMM has its own tile.
"""
from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

TABLE_PATH = Path(__file__).with_name("fused_moe_configs.json")


@dataclass(frozen=True)
class Tile:
    block_n: int
    block_k: int
    group_m: int = 1
    num_warps: int = 4
    num_stages: int = 3


@dataclass(frozen=True)
class MoeConfig:
    block_m: int
    gate_up: Tile
    down: Tile

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "MoeConfig":
        return cls(int(d["block_m"]), Tile(**d["gate_up"]), Tile(**d["down"]))


def shape_key(num_experts: int, hidden: int, inter: int, top_k: int,
              dtype: torch.dtype) -> str:
    return f"E={num_experts},H={hidden},I={inter},K={top_k},{str(dtype).removeprefix('torch.')}"


_override: dict | None = None


def set_table(table: dict | None) -> None:
    """Use ``table`` instead of the committed file (the tuning run installs what it
    just measured); None goes back to the file."""
    global _override
    _override = table
    _device_table.cache_clear()
    _device_name.cache_clear()


@functools.lru_cache(maxsize=None)
def _device_table(device_name: str) -> dict:
    table = _override
    if table is None:
        table = json.loads(TABLE_PATH.read_text()) if TABLE_PATH.exists() else {}
    return table.get(device_name, {})


@functools.lru_cache(maxsize=None)
def _device_name(index: int | None) -> str:   # asked once per device, not per layer
    return torch.cuda.get_device_name(index)


def _pow2_between(n: int, low: int, high: int) -> int:
    p = 1 << max(0, int(n) - 1).bit_length()
    return max(low, min(high, p))


def default_config(num_tokens: int, top_k: int, num_experts: int, hidden: int, inter: int,
                   dtype: torch.dtype, interpreted: bool = False) -> MoeConfig:
    """Untuned sizes: rows per block near the pairs each expert gets (few at decode, so
    little padding), 64-wide tiles (32-deep in fp32, whose tiles take twice the shared
    memory), never wider than the matrix."""
    if interpreted:   # numpy runs every program: small tiles keep CPU tests quick
        return MoeConfig(16, Tile(_pow2_between(inter, 16, 32), _pow2_between(hidden, 16, 32)),
                         Tile(_pow2_between(hidden, 16, 32), _pow2_between(inter, 16, 32)))
    pairs_per_expert = num_tokens * top_k / max(1, num_experts)
    block_m = 16 if pairs_per_expert <= 16 else 32 if pairs_per_expert <= 48 else 64
    deep = 32 if dtype == torch.float32 else 64
    stages = 2 if dtype == torch.float32 else 3
    group_m = 8 if block_m >= 64 else 1

    def tile(n: int, k: int) -> Tile:
        return Tile(_pow2_between(n, 16, 64), _pow2_between(k, 16, deep), group_m, 4, stages)
    return MoeConfig(block_m, tile(inter, hidden), tile(hidden, inter))


def choose_config(num_tokens: int, top_k: int, num_experts: int, hidden: int, inter: int,
                  dtype: torch.dtype, device: torch.device,
                  interpreted: bool = False) -> MoeConfig:
    if device.type == "cuda" and not interpreted:
        buckets = _device_table(_device_name(device.index)).get(
            shape_key(num_experts, hidden, inter, top_k, dtype))
        if buckets:
            sizes = sorted(int(b) for b in buckets)
            bucket = next((b for b in sizes if b >= num_tokens), sizes[-1])
            return MoeConfig.from_dict(buckets[str(bucket)])
    return default_config(num_tokens, top_k, num_experts, hidden, inter, dtype, interpreted)
