"""Each of the 4-bit GEMV's autotuning configs (kernels/w4a16_gemv.py ``_CONFIGS``) alone, on
the H200: its compile seconds and its device time at every shape and row count the engine
calls it with, then the fewest configs that keep every (shape, rows) within ``--slack`` of
its best (issue 16).

Why: the autotuner compiles every config for each row count (1, 2, 4: BLOCK_M is a
constant of the kernel) before the engine can serve; call 33 (2026-12-03) took 62 s at one
row and 160 s at four for the 17 configs, more than the rest of the startup together.

Compiles run in ``--workers`` processes at once (they share Triton's on-disk cache, so
the timing process only loads them); the times are CUDA-graph replays over weight copies
larger than L2 (benchmarks/gpu/gemv.py's method), each output checked first.

    python -m benchmarks.gpu.gemv_configs --out DIR     # DIR/gemv_configs.json
    python -m benchmarks.gpu.gemv_configs --smoke       # two configs, tiny shapes, CPU
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from benchmarks.gpu.gemv import GROUP, SHAPES, SMOKE_GROUP, SMOKE_SHAPES
from benchmarks.gpu.w4a16 import COLD_BYTES, call_us, significant

ROWS = (1, 2, 4)
# (BLOCK_N, ROWS, CHUNKS, num_warps): the 17 configs the kernel was autotuned over until
# call 35 chose two of them (w4a16_gemv._CONFIGS)
TRIED_S11 = ((1024, 8, 1, 4), (1024, 16, 1, 4), (1024, 4, 1, 4), (512, 8, 1, 2),
             (512, 16, 1, 2), (512, 8, 1, 4), (512, 16, 1, 4), (2048, 8, 1, 8),
             (2048, 4, 1, 8), (256, 16, 1, 1), (256, 16, 1, 2), (1024, 8, 1, 8),
             (1024, 8, 2, 8), (1024, 16, 2, 8), (1024, 16, 2, 4), (2048, 16, 2, 8),
             (512, 16, 4, 4))


def candidate_configs(group: int, smoke: bool,
                      wanted: str | None = None) -> list[tuple[int, int, int, int]]:
    """``wanted``: "BLOCK_NxROWSxCHUNKSxWARPS,..." instead of the s11 list."""
    if smoke:    # the interpreter's tile width, two shapes of program
        return [(32, 2, 1, 4), (32, 4, 1, 4)]
    configs = TRIED_S11 if wanted is None else [
        tuple(int(v) for v in c.split("x")) for c in wanted.split(",")]
    return [c for c in configs if (group // 8) % c[1] == 0]


def fits(config, k: int) -> bool:
    return (k // 8) % (config[1] * config[2]) == 0


def _compile_one(config, shapes, smoke: bool) -> float:
    """Seconds to compile ``config`` for every row count and both EVEN_N cases, on small
    inputs (a compile depends on the shapes only through constants and divisibility:
    K of one group per program, N of one tile or a tile and a bit; call 34 built the
    real weights on the host in every process and ran out of time before a timing)."""
    import torch

    from kubellm.kernels.w4a16_gemv import launch
    device = "cpu" if smoke else "cuda"
    group = SMOKE_GROUP if smoke else GROUP
    dtype = torch.float32 if smoke else torch.bfloat16
    block_n, rows, chunks, _ = config
    k = math.lcm(group, 8 * rows * chunks)
    t0 = time.perf_counter()
    for n in sorted({block_n, block_n + 16} if any(n % block_n for _, n in shapes)
                    else {block_n}):
        q = torch.randint(-2**31, 2**31 - 1, (k // 8, n), dtype=torch.int32, device=device)
        s = torch.ones(k // group, n, dtype=dtype, device=device)
        for m in ROWS:
            launch(torch.randn(m, k, dtype=dtype, device=device), q, s, s, group, config)
    if device == "cuda":
        torch.cuda.synchronize()
    took = time.perf_counter() - t0
    print(f"compiled {config} in {took:.1f} s", flush=True)
    return took


def compile_all(configs, shapes, smoke: bool, workers: int) -> dict:
    """config -> its compile seconds, the configs spread over ``workers`` processes."""
    if smoke or workers <= 1:
        return {c: _compile_one(c, shapes, smoke) for c in configs}
    import multiprocessing
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {c: pool.submit(_compile_one, c, shapes, smoke) for c in configs}
        return {c: f.result() for c, f in futures.items()}


def covering_set(times: dict, slack: float) -> list:
    """Greedy: the fewest configs such that each (shape, rows) has one within ``slack``
    of its best; ``times`` maps (shape, rows) -> {config: us}."""
    good = {case: {c for c, us in per.items() if us <= min(per.values()) * (1 + slack)}
            for case, per in times.items()}
    chosen, open_cases = [], set(good)
    while open_cases:
        best = max({c for case in open_cases for c in good[case]},
                   key=lambda c: (sum(c in good[case] for case in open_cases), -sum(
                       times[case].get(c, 1e9) for case in times)))
        chosen.append(best)
        open_cases = {case for case in open_cases if best not in good[case]}
    return chosen


def int4_copies(k: int, n: int, group: int, device: str, dtype, copies_of):
    """Random packed codes, scales and biases made on the device (the real layout; the
    head's 525 M codes would take the host a while), as many copies as keep them out of
    L2 -> (copies, bytes of one)."""
    import torch
    gen = torch.Generator(device).manual_seed(k + n)
    nbytes = k // 8 * n * 4 + 2 * (k // group) * n * torch.tensor([], dtype=dtype).element_size()

    def one():
        q = torch.randint(-2**31, 2**31 - 1, (k // 8, n), dtype=torch.int32, device=device,
                          generator=gen)
        scales = (torch.rand(k // group, n, device=device, generator=gen) * 0.004 + 0.001)
        return q, scales.to(dtype), (-8 * scales).to(dtype)
    return [one() for _ in range(copies_of(nbytes))], nbytes


def run(smoke: bool, workers: int, slack: float, wanted: str | None = None) -> dict:
    import torch

    from benchmarks.gpu import workload_w as W
    from kubellm.kernels.w4a16_gemm import w4a16_gemm_ref
    from kubellm.kernels.w4a16_gemv import launch
    device, group = ("cpu", SMOKE_GROUP) if smoke else ("cuda", GROUP)
    dtype = torch.float32 if smoke else torch.bfloat16
    shapes = SMOKE_SHAPES if smoke else SHAPES
    configs = candidate_configs(group, smoke, wanted)
    t0 = time.perf_counter()
    compile_s = compile_all(configs, shapes, smoke, workers)
    compile_wall = time.perf_counter() - t0
    print(f"compiled {len(configs)} configs in {compile_wall:.1f} s wall "
          f"({sum(compile_s.values()):.1f} s summed over processes)", flush=True)
    if smoke:
        W.DEVICE, W.DTYPE = "cpu", torch.float32
    copy_tb_s = W.measure_ceilings()["copy_tb_s"]
    copies_of = (lambda b: 1) if smoke else (lambda b: max(2, -(-COLD_BYTES // b)))
    times, rows = {}, []
    for k, n in shapes:
        copies, nbytes = int4_copies(k, n, group, device, dtype, copies_of)
        for m in ROWS:
            x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(device, dtype)
            ref = w4a16_gemm_ref(x, *copies[0], group).float()
            per = {}
            for c in configs:
                if not fits(c, k):
                    continue
                diff = (launch(x, *copies[0], group, c).float() - ref).abs().max().item()
                if diff > 0.05 * ref.abs().max().item() + 1e-3:
                    raise AssertionError(f"config {c} at {k}x{n}, {m} rows: max diff {diff}")
                per[c] = call_us([lambda w=w: launch(x, *w, group, c) for w in copies], device)
            best = min(per, key=per.get)
            times[(k, n, m)] = per
            rows.append({"k": k, "n": n, "m": m, "best": list(best),
                         "best_us": significant(per[best]),
                         "best_of_copy_bandwidth": significant(
                             nbytes / (per[best] * 1e-6) / 1e12 / copy_tb_s),
                         "us": {"x".join(map(str, c)): significant(us) for c, us in per.items()}})
            print("gemv_configs", json.dumps({key: rows[-1][key] for key in
                                              ("k", "n", "m", "best", "best_us")}), flush=True)
        del copies
    chosen = covering_set(times, slack)
    worst = {f"{k}x{n}@{m}": significant(min(per[c] for c in chosen if c in per)
                                         / min(per.values()))
             for (k, n, m), per in times.items()}
    return {"copy_tb_s": copy_tb_s, "group_size": group, "slack": slack,
            "configs": ["x".join(map(str, c)) + " (BLOCK_N x ROWS x CHUNKS x warps)"
                        for c in configs],
            "compile_s": {"x".join(map(str, c)): significant(s) for c, s in compile_s.items()},
            "compile_wall_s": significant(compile_wall),
            "chosen": [list(c) for c in chosen],
            "chosen_compile_s": significant(sum(compile_s[c] for c in chosen)),
            "all_compile_s": significant(sum(compile_s.values())),
            "chosen_over_best": worst, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--workers", type=int, default=min(16, os.cpu_count() or 1))
    ap.add_argument("--slack", type=float, default=0.03)
    ap.add_argument("--configs", help="BLOCK_NxROWSxCHUNKSxWARPS,... to time instead of "
                                      "the 17 of s11 (each ROWS must divide a group's "
                                      "rows of words)")
    args = ap.parse_args(argv)
    if args.smoke:   # CPU tensors run the Triton kernel in its interpreter
        os.environ.setdefault("TRITON_INTERPRET", "1")
    result = run(args.smoke, args.workers, args.slack, args.configs)
    print(json.dumps({k: result[k] for k in ("compile_wall_s", "all_compile_s", "chosen",
                                              "chosen_compile_s", "chosen_over_best")},
                     indent=1))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gemv_configs.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
