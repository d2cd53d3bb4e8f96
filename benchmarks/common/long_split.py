"""``--long-split S,C`` of the engine benchmarks: the decode_long_split switch's split
count and fewest keys per split in this process (paged_attention.LONG_SPLITS and
LONG_SPLIT_MIN_CHUNK), to try a setting on the GPU before it is the default."""
from __future__ import annotations

HELP = ("S,C: the decode_long_split switch's split count and fewest keys per split in "
        "this process, to try a setting before it is the default")


def apply(text: str) -> None:
    if not text:
        return
    from kubellm.kernels import paged_attention
    splits, chunk = (int(v) for v in text.split(","))
    if splits < 2 or chunk < 1:
        raise SystemExit(f"--long-split {text!r}: want S >= 2 splits and C >= 1 keys")
    paged_attention.LONG_SPLITS, paged_attention.LONG_SPLIT_MIN_CHUNK = splits, chunk
