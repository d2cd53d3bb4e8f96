"""``--with-decode-config TEXT`` of the engine benchmarks: one engine whose paged decode
calls launch with another tile config than paged_attention.DECODE_CONFIG -- "autotune"
(the autotuner's choice, as before s18: tuned on the first call of each key, in the
engine a CUDA-graph warm-up whose sequences hold one key) or "BLOCK_N,WARPS,STAGES".
The engine's graphs keep the config they were captured with, so each engine builds and
runs inside ``active(...)``."""
from __future__ import annotations

import contextlib

HELP = ('"autotune" or "BLOCK_N,WARPS,STAGES": one more engine whose decode attention '
        "launches with that tile config instead of paged_attention.DECODE_CONFIG")


def parse(text: str):
    """The DECODE_CONFIG value ``text`` names: None for "autotune", else a tuple."""
    if text == "autotune":
        return None
    try:
        block_n, warps, stages = (int(v) for v in text.split(","))
    except ValueError:
        raise SystemExit(f"--with-decode-config {text!r}: want \"autotune\" or "
                         "BLOCK_N,WARPS,STAGES") from None
    return block_n, warps, stages


@contextlib.contextmanager
def active(text: str):
    """paged_attention.DECODE_CONFIG set to what ``text`` names inside the block."""
    from kubellm.kernels import paged_attention
    saved = paged_attention.DECODE_CONFIG
    paged_attention.DECODE_CONFIG = parse(text) if text else saved
    try:
        yield
    finally:
        paged_attention.DECODE_CONFIG = saved
