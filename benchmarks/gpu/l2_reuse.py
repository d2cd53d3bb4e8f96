"""Why did prefetching weights into L2 slow small decode steps (call 96)? Two questions,
at one row, in CUDA graphs of 32 "layers" (each its own weight copy, so nothing stays in
L2 from the layer before), each layer a small kernel (RMSNorm of the row) then a GEMV:

- does a GEMV read the bytes a prefetch put in L2 from there? ``serial``: the prefetch
  on the same stream between the norm and the GEMV; if the GEMV reuses them, serial
  costs less than ``alone`` (the prefetches by themselves) added to ``plain``;
- what does a parallel branch cost by itself? ``fork_empty``: each layer forks a side
  stream that prefetches one 128-byte line beside the norm (joined at the end);
  ``fork``: the same with the real prefetch (what the l2_prefetch switch did).

GEMVs: bf16 cuBLAS (F.linear) and the 4-bit kernel (w4a16_gemm's default at one row)
on Llama-3-8B's O projection (4096 x 4096) and down projection (14336 -> 4096).

    python -m benchmarks.gpu.l2_reuse --out DIR     # DIR/l2_reuse.json
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
from pathlib import Path

import torch

MIB = 2**20
SHAPES = {"o": (4096, 4096), "down": (14336, 4096)}     # K in, N out
PREFETCH_MIB = (4, 8, 16)
LAYERS, GROUP = 32, 128


def weights(kind: str, k: int, n: int):
    if kind == "bf16":
        return [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / math.sqrt(k)
                for _ in range(LAYERS)]
    out = []
    for _ in range(LAYERS):
        codes = torch.randint(-2**31, 2**31 - 1, (k // 8, n), dtype=torch.int32, device="cuda")
        scales = torch.full((k // GROUP, n), 1 / (4.6 * math.sqrt(k)), device="cuda",
                            dtype=torch.bfloat16)
        out.append((codes, scales, -7.5 * scales))
    return out


def gemv(kind: str, x, w):
    from kubellm.kernels.w4a16_gemm import w4a16_gemm
    if kind == "bf16":
        return torch.nn.functional.linear(x, w)
    return w4a16_gemm(x, *w, GROUP)


def main_tensor(kind: str, w) -> torch.Tensor:
    return w if kind == "bf16" else w[0]


def graph_ms(fn, replays: int = 20) -> float:
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def variants(kind: str, ws, x, norm_w, mib: int, mode: str):
    from kubellm.kernels.l2_prefetch import l2_prefetch
    from kubellm.kernels.rms_norm import rms_norm
    side = torch.cuda.Stream()
    k = x.shape[1]

    def plain():
        for w in ws:
            gemv(kind, rms_norm(x, norm_w, 1e-5)[:, :k], w)

    def alone():
        for w in ws:
            l2_prefetch(main_tensor(kind, w), mib * MIB, mode)

    def serial():
        for w in ws:
            h = rms_norm(x, norm_w, 1e-5)
            l2_prefetch(main_tensor(kind, w), mib * MIB, mode)
            gemv(kind, h[:, :k], w)

    def forked(nbytes):
        def run():
            main = torch.cuda.current_stream()
            for w in ws:
                side.wait_stream(main)
                with torch.cuda.stream(side):
                    l2_prefetch(main_tensor(kind, w), nbytes, mode)
                gemv(kind, rms_norm(x, norm_w, 1e-5)[:, :k], w)
            main.wait_stream(side)
        return run
    return {"plain": plain, "alone": alone, "serial": serial,
            "fork_empty": forked(128 if mode != "bulk" else 4096), "fork": forked(mib * MIB)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    ap.add_argument("--modes", default="line,bulk")
    args = ap.parse_args(argv)
    from benchmarks.common.ceilings import measure_ceilings
    copy = measure_ceilings("cuda", torch.bfloat16)["copy_tb_s"]
    rows = []
    with torch.inference_mode():
        for kind in ("bf16", "4bit"):
            for name, (k, n) in SHAPES.items():
                ws = weights(kind, k, n)
                x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
                norm_w = torch.ones(k, device="cuda", dtype=torch.bfloat16)
                plain_ms = None
                for mode in args.modes.split(","):
                    for mib in PREFETCH_MIB:
                        fns = variants(kind, ws, x, norm_w, mib, mode)
                        us = {v: round(graph_ms(f) * 1e3 / LAYERS, 3) for v, f in fns.items()}
                        plain_ms = plain_ms or us["plain"]
                        row = {"kind": kind, "gemv": name, "mode": mode, "mib": mib,
                               "us_per_layer": us,
                               # what the GEMV saved by finding prefetched bytes in L2
                               "reuse_us": round(us["plain"] + us["alone"] - us["serial"], 3),
                               "prefetch_at_copy_rate_us": round(mib * MIB / copy / 1e6, 3),
                               "fork_cost_us": round(us["fork_empty"] - us["plain"], 3)}
                        rows.append(row)
                        print(json.dumps(row), flush=True)
                del ws
                torch.cuda.empty_cache()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "l2_reuse.json").write_text(json.dumps({"copy_tb_s": copy, "rows": rows},
                                                        indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
