"""Workload W with kernel switches off and on, in one run: an engine with the defaults,
then one with ``--with`` over them (CUDA graphs are captured with the switches as they
were at startup, so a decode-kernel switch needs an engine of its own). Each engine runs
W ``--repeats`` times on token ids of its own per repeat (no prefix-cache hits), after
benchmarks/gpu/workload_w.py's warm-up; the best and every rate are printed, the ratio
of the bests, and each best against W's limit and strict limit (ceilings measured in the
same run).

    python -m benchmarks.gpu.w_switches --with decode_long_split --out DIR
    python -m benchmarks.gpu.w_switches --with-decode-config autotune --out DIR
    python -m benchmarks.gpu.w_switches --with-prefill-config autotune --out DIR
    python -m benchmarks.gpu.w_switches --with-prefill-step-tokens 100000 --out DIR
    python -m benchmarks.gpu.w_switches --with decode_long_split --smoke --out DIR   # CPU
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import torch

from benchmarks.common import long_split, tile_config
from benchmarks.common.shapes import write_config
from benchmarks.gpu import workload_w as w


def run_engine(model_dir, switches: str | None, repeats: int,
               tiles: dict | None = None) -> dict:
    overrides = {"kernel_switches": switches} if switches else {}
    tiles = tiles or {}
    with tile_config.active(**tiles):
        llm, startup = w.make_llm(model_dir, **overrides)
        rates = [w.run_ours(llm, w.workload(seed=200 + i))["output_tok_s"]
                 for i in range(repeats)]
    row = {"kernel_switches": llm.engine.executor.switches.describe(),
           "tile_config": tile_config.describe(**tiles), "startup_s": round(startup, 1),
           "output_tok_s": rates, "best": max(rates)}
    del llm
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    print(json.dumps(row), flush=True)
    return row


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--with", dest="switches", default="",
                    help="kernel switches (--kernel-switches text) of the second engine")
    tile_config.add_options(ap, "the second engine")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--smoke", action="store_true", help="tiny shape and workload on the CPU")
    ap.add_argument("--long-split", default="", help=long_split.HELP)
    args = ap.parse_args()
    long_split.apply(args.long_split)
    tiles = tile_config.from_args(args)   # a bad text fails before any run
    if not args.switches and not any(tiles.values()):
        ap.error("--with, --with-decode-config, --with-prefill-config or "
                 "--with-prefill-step-tokens: what the second engine changes")
    if args.smoke:
        w.use_smoke_sizes()
    model_dir = write_config(w.SHAPE, Path(tempfile.mkdtemp()) / "model")
    ceilings = w.measure_ceilings()
    limit = w.limit_estimate(w.workload(), ceilings)   # every seed has W's lengths
    off = run_engine(model_dir, None, args.repeats)
    on = run_engine(model_dir, args.switches, args.repeats, tiles)
    for row in (off, on):
        row["fraction_of_limit"] = round(row["best"] / limit["limit_output_tok_s"], 3)
        row["fraction_of_strict_limit"] = round(
            row["best"] / limit["strict_limit_output_tok_s"], 3)
    result = {"device": torch.cuda.get_device_name() if w.DEVICE == "cuda" else "cpu",
              "with": args.switches, "with_tile_config": tile_config.describe(**tiles),
              "long_split": args.long_split or None,
              "ceilings": ceilings, "limit": limit, "defaults": off, "with_switches": on,
              "on_over_off": round(on["best"] / off["best"], 3)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "w_switches.json").write_text(json.dumps(result, indent=1))
    changed = " ".join(filter(None, [args.switches, any(tiles.values()) and
                                     f"tile config {tile_config.describe(**tiles)}"]))
    print(f"W with {changed} over the defaults: {result['on_over_off']} "
          f"({on['best']} against {off['best']} output tok/s; of the strict limit "
          f"{on['fraction_of_strict_limit']} against {off['fraction_of_strict_limit']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
