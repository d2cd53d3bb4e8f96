"""``--with-decode-config TEXT`` and ``--with-prefill-config TEXT`` of the engine
benchmarks: one more engine whose paged-attention calls launch with other tile configs
than paged_attention.DECODE_CONFIG (decode-only calls) and PREFILL_CONFIG (calls with
prefill chunks) -- "autotune" (the autotuner's choice, as before s18: tuned on the first
call of each key, in the engine a CUDA-graph warm-up) or "BLOCK_N,WARPS,STAGES".
``--with-prefill-step-tokens N``: the same engine's steps of N or more new tokens take the
prefill kernel whatever their chunks' lengths (triton_backend.PREFILL_KERNEL_MIN_STEP_TOKENS;
a huge N: only chunks of PREFILL_KERNEL_MIN_QUERY tokens do, as before s19).
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
STEP_HELP = ("N: the same engine's steps of N or more new tokens take the prefill kernel "
             "(attention/triton_backend.PREFILL_KERNEL_MIN_STEP_TOKENS)")


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


def add_options(ap, which: str) -> None:
    """The three options on ``ap``; ``which`` says which engine they change."""
    ap.add_argument("--with-decode-config", default="", help=f"{DECODE_HELP} ({which})")
    ap.add_argument("--with-prefill-config", default="", help=f"{PREFILL_HELP} ({which})")
    ap.add_argument("--with-prefill-step-tokens", default="", help=f"{STEP_HELP} ({which})")


def from_args(args) -> dict:
    """The options' texts as ``active``'s keyword arguments; exits naming the option if
    one names no config (before any run)."""
    tiles = {"decode": args.with_decode_config, "prefill": args.with_prefill_config,
             "prefill_step": args.with_prefill_step_tokens}
    check(**tiles)
    return tiles


def parse_step(text: str) -> int:
    try:
        tokens = int(text)
    except ValueError:
        tokens = 0
    if tokens < 1:
        raise SystemExit(f"--with-prefill-step-tokens {text!r}: want a positive token count")
    return tokens


def check(decode: str = "", prefill: str = "", prefill_step: str = "") -> None:
    """Exit with a message naming the option if a text names no config."""
    if decode:
        parse(decode, "--with-decode-config")
    if prefill:
        parse(prefill, "--with-prefill-config")
    if prefill_step:
        parse_step(prefill_step)


def describe(decode: str = "", prefill: str = "", prefill_step: str = "") -> str:
    """"decode 64,4,2 prefill autotune" for what differs from the defaults; "default"."""
    return " ".join(f"{name} {text}" for name, text in
                    (("decode", decode), ("prefill", prefill),
                     ("prefill_step_tokens", prefill_step)) if text) or "default"


@contextlib.contextmanager
def active(decode: str = "", prefill: str = "", prefill_step: str = ""):
    """paged_attention.DECODE_CONFIG / PREFILL_CONFIG and
    triton_backend.PREFILL_KERNEL_MIN_STEP_TOKENS set to what the texts name inside the
    block (an empty text keeps the default)."""
    from kubellm.kernels import paged_attention
    from kubellm.runtime.attention import triton_backend
    saved = (paged_attention.DECODE_CONFIG, paged_attention.PREFILL_CONFIG,
             triton_backend.PREFILL_KERNEL_MIN_STEP_TOKENS)
    if decode:
        paged_attention.DECODE_CONFIG = parse(decode, "--with-decode-config")
    if prefill:
        paged_attention.PREFILL_CONFIG = parse(prefill, "--with-prefill-config")
    if prefill_step:
        triton_backend.PREFILL_KERNEL_MIN_STEP_TOKENS = parse_step(prefill_step)
    try:
        yield
    finally:
        (paged_attention.DECODE_CONFIG, paged_attention.PREFILL_CONFIG,
         triton_backend.PREFILL_KERNEL_MIN_STEP_TOKENS) = saved
