"""``--with-decode-config TEXT`` and ``--with-prefill-config TEXT`` of the engine
benchmarks: one more engine whose paged-attention calls launch with other tile configs
than paged_attention.DECODE_CONFIG (decode-only calls) and PREFILL_CONFIG (calls with
prefill chunks) -- "autotune" (the autotuner's choice, as before s18: tuned on the first
call of each key, in the engine a CUDA-graph warm-up) or "BLOCK_N,WARPS,STAGES".
The engine's graphs keep the configs they were captured with, so each engine builds and
runs inside ``active(...)``."""
from __future__ import annotations

import contextlib

DECODE_HELP = ('"autotune" or "BLOCK_N,WARPS,STAGES": one more engine whose decode '
               "attention launches with that tile config instead of "
               "paged_attention.DECODE_CONFIG")
PREFILL_HELP = ('"autotune" or "BLOCK_N,WARPS,STAGES": one more engine whose paged '
                "attention calls with prefill chunks launch with that tile config instead "
                "of paged_attention.PREFILL_CONFIG")


def parse(text: str, option: str = "--with-decode-config"):
    """The config value ``text`` names: None for "autotune", else a tuple."""
    if text == "autotune":
        return None
    try:
        block_n, warps, stages = (int(v) for v in text.split(","))
    except ValueError:
        raise SystemExit(f"{option} {text!r}: want \"autotune\" or "
                         "BLOCK_N,WARPS,STAGES") from None
    return block_n, warps, stages


def check(decode: str = "", prefill: str = "") -> None:
    """Exit with a message naming the option if either text names no config."""
    if decode:
        parse(decode, "--with-decode-config")
    if prefill:
        parse(prefill, "--with-prefill-config")


def describe(decode: str = "", prefill: str = "") -> str:
    """"decode 64,4,2 prefill autotune" for what differs from the defaults; "default"."""
    return " ".join(f"{name} {text}" for name, text in
                    (("decode", decode), ("prefill", prefill)) if text) or "default"


@contextlib.contextmanager
def active(decode: str = "", prefill: str = ""):
    """paged_attention.DECODE_CONFIG / PREFILL_CONFIG set to what ``decode`` / ``prefill``
    name inside the block (an empty text keeps the default)."""
    from kubellm.kernels import paged_attention
    saved = paged_attention.DECODE_CONFIG, paged_attention.PREFILL_CONFIG
    if decode:
        paged_attention.DECODE_CONFIG = parse(decode, "--with-decode-config")
    if prefill:
        paged_attention.PREFILL_CONFIG = parse(prefill, "--with-prefill-config")
    try:
        yield
    finally:
        paged_attention.DECODE_CONFIG, paged_attention.PREFILL_CONFIG = saved
