"""4-bit weights against bf16 on one GPU, in one run (issue 16, BENCHMARKS.md "4-bit
weights"): Llama-3-8B shape, random weights in the real packing (dummy bf16 weights
quantized at load by quantization="4bit", groups of 128: the same codes, scales and
biases layout every checkpoint format is repacked into).

- decode tok/s at batch 1, 8, 32, 64, 256, context 512, for both engines;
- workload W (workload_w.py) for both;
- weight GiB and KV-cache blocks of both;
- the 4-bit engine again with the w4a16_tinygemm switch (ENGINES: linear calls of up to
  4 rows through PyTorch's int4 GEMM on a repacked copy); --engines picks which run,
  among them 4-bit with the LM head quantized too (4bit-head: quantize_lm_head),
  FP8 weights (quantization="fp8"), an FP8 KV cache (kv_cache_dtype="fp8")
  and both (fp8, kv-fp8, fp8-kv-fp8), and FP8 weights whose activations are rounded in
  one kernel (fp8-quant-kernel: the fp8_quant_kernel switch, on by default on Hopper) or
  in torch (fp8-torch-quant), each against bf16 the same way;
- the W4A16 GEMM alone at batch 1..64 on each projection shape: bytes of weights read per
  second against the copy bandwidth measured in the run, bf16 cuBLAS (F.linear) and
  PyTorch's int4 GEMM (tinygemm, kernels/tinygemm.py) on the same shapes.

Each engine runs in its own process (an engine's CUDA graphs keep their memory until the
process exits, which would shrink the second engine's KV pool).

    python -m benchmarks.gpu.w4a16 --out DIR            # writes DIR/w4a16.json
    python -m benchmarks.gpu.w4a16 --smoke --out DIR    # tiny shape on the CPU (CI)
    python -m benchmarks.gpu.w4a16 --engines 4bit --variants dot,dot-zeros --out DIR
        # the GEMM part times only those variants (no tinygemm, no probes): shorter
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BATCHES, CONTEXT, GROUP_SIZE = (1, 8, 32, 64, 256), 512, 128
SMOKE_BATCHES, SMOKE_CONTEXT, SMOKE_GROUP = (1, 4), 16, 64
# Llama-3-8B projections (K in, N out): qkv, o, gate+up, down
GEMM_SHAPES = [(4096, 6144), (4096, 4096), (4096, 28672), (14336, 4096)]
SMOKE_GEMM_SHAPES = [(64, 128), (128, 64)]   # the second one tinygemm takes too
KERNEL_BATCHES = (1, 4, 16, 64)
# engine -> what it sets beside bf16's engine; every other one is compared with bf16.
# 4-bit engines take GROUP_SIZE (SMOKE_GROUP) too. --engines picks; the default is the
# 4-bit ones, the FP8 ones (weights; KV cache; both) are asked for by name
ENGINES = {"bf16": {}, "4bit": {"quantization": "4bit"},
           # the LM head in 4-bit too (quantize_lm_head): at batch 1 it is a fifth of
           # the bf16 engine's weight read, which the default keeps in bf16
           "4bit-head": {"quantization": "4bit", "quantize_lm_head": True},
           "4bit-tinygemm": {"quantization": "4bit", "kernel_switches": "w4a16_tinygemm"},
           "fp8": {"quantization": "fp8"}, "kv-fp8": {"kv_cache_dtype": "fp8"},
           "fp8-kv-fp8": {"quantization": "fp8", "kv_cache_dtype": "fp8"},
           "fp8-quant-kernel": {"quantization": "fp8", "kernel_switches": "fp8_quant_kernel"},
           "fp8-torch-quant": {"quantization": "fp8",
                               "kernel_switches": "fp8_quant_kernel=off"}}
DEFAULT_ENGINES = "4bit,4bit-tinygemm"
COLD_BYTES = 256 * 2**20     # weight copies per timed shape: more than the L2 holds


def engine_part(args) -> dict:
    """One engine (bf16 or 4-bit): memory, decode rates, workload W."""
    import torch

    from benchmarks.gpu import workload_w as W
    from benchmarks.common.shapes import write_config
    from kubellm.runtime import LLM
    if args.smoke:
        W.NUM_REQUESTS, W.LOW, W.HIGH, W.OUTPUT_LEN = 8, 8, 40, 6
        W.SHAPE, W.DEVICE, W.DTYPE = W.SMOKE_SHAPE, "cpu", torch.float32
    model_dir = write_config(W.SHAPE, Path(tempfile.mkdtemp()) / "model")
    quant = dict(ENGINES[args.engine])
    if quant.get("quantization") == "4bit":
        quant["quantization_group_size"] = SMOKE_GROUP if args.smoke else GROUP_SIZE
    t0 = time.perf_counter()
    llm = LLM(model_dir, load_format="dummy", skip_tokenizer_init=True, max_model_len=10240,
              max_num_seqs=256 if not args.smoke else 8, max_num_batched_tokens=8192,
              gpu_memory_utilization=0.9, device=W.DEVICE,
              dtype=str(W.DTYPE).removeprefix("torch."), **quant)
    startup = time.perf_counter() - t0
    model = llm.engine.executor.model
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    linear_bytes = sum(p.numel() * p.element_size() for n, p in model.named_parameters()
                       if "proj" in n)
    batches = SMOKE_BATCHES if args.smoke else BATCHES
    context = SMOKE_CONTEXT if args.smoke else CONTEXT
    decode = [W.decode_rate(llm, b, context, steps=16, output_kind="final_only")
              for b in batches]
    for row in decode:
        print(args.engine, "decode", row["batch"], row["decode_tok_s"], flush=True)
    prompts = W.workload()
    w = W.run_ours(llm, prompts)
    print(args.engine, "W", w["output_tok_s"], flush=True)
    return {"engine": args.engine, **quant, "startup_s": round(startup, 1),
            "weight_gib": round(weight_bytes / 2**30, 3),
            "linear_weight_gib": round(linear_bytes / 2**30, 3),
            "weight_bytes": weight_bytes, "linear_weight_bytes": linear_bytes,
            "num_kv_blocks": llm.engine.kv.num_blocks, "block_size": 16,
            "decode": [{k: r[k] for k in ("batch", "context", "decode_tok_s", "step_ms",
                                          "host_ms")} for r in decode],
            "workload_w": {k: w[k] for k in ("output_tok_s", "total_tok_s", "elapsed_s",
                                             "num_kv_blocks", "preemptions")}}


def kernel_part(args) -> dict:
    """The GEMM alone, each kernel variant (w4a16_gemm.VARIANTS) at batch 1..64 on each
    projection shape: device time per call (CUDA-graph replays: no launch cost, as in the
    engine's decode graphs), weights read per second against the copy rate, and bf16
    cuBLAS (F.linear) on the same shapes. Each call reads another copy of the weights, so
    the copies (>= 256 MiB) never sit in the 50 MiB L2."""
    import torch

    from benchmarks.gpu import workload_w as W
    from kubellm.kernels import tinygemm
    from kubellm.kernels.quant_layout import pack_codes
    from kubellm.kernels.w4a16_gemm import GEMVS, VARIANTS, default_variant, w4a16_gemm
    device = "cpu" if args.smoke else "cuda"
    if args.smoke:
        W.DEVICE, W.DTYPE = "cpu", torch.float32
    dtype = W.DTYPE
    copy_tb_s = W.measure_ceilings()["copy_tb_s"]
    group = SMOKE_GROUP if args.smoke else GROUP_SIZE
    rows = []
    for k, n in (SMOKE_GEMM_SHAPES if args.smoke else GEMM_SHAPES):
        gen = torch.Generator().manual_seed(k + n)
        qweight = pack_codes(torch.randint(0, 16, (k, n), generator=gen), 4)
        scales = torch.rand(k // group, n, generator=gen) * 0.01
        quant_bytes = qweight.numel() * 4 + 2 * scales.numel() * torch.finfo(dtype).bits // 8
        copies = 1 if args.smoke else max(2, -(-COLD_BYTES // quant_bytes))
        quant = [(qweight.to(device), scales.to(device, dtype), (-8 * scales).to(device, dtype))
                 for _ in range(copies)]
        # the peer: PyTorch's int4 GEMM (tinygemm) on the same codes, repacked; bf16 only
        # (so in bf16 on the CPU smoke run too)
        bf16 = torch.bfloat16
        peer = None if tinygemm.unsupported_reason(k, n, group, 4, False, bf16) else \
            [tinygemm.repack(q[0], q[1].to(bf16), q[2].to(bf16), group) for q in quant]
        dense_copies = 1 if args.smoke else max(2, -(-COLD_BYTES // (2 * k * n)))
        dense = [torch.randn(n, k, generator=gen).to(device, dtype) * 0.02
                 for _ in range(dense_copies)]
        # the same weights as 8-bit codes (twice the bytes, the same number of weights to
        # unpack): a GEMM that takes as long with them is bound by its per-weight work,
        # not by reading the weights
        quant8 = [] if args.variants else [
            (pack_codes(torch.randint(0, 256, (k, n), generator=gen), 8).to(device), q[1], q[2])
            for q in quant]
        for m in ((1, 4) if args.smoke else KERNEL_BATCHES):
            x = torch.randn(m, k, generator=gen).to(device, dtype)
            us_dense = call_us([lambda w=w: torch.nn.functional.linear(x, w) for w in dense],
                               device)
            row = {"k": k, "n": n, "m": m, "bf16_linear_us": significant(us_dense),
                   "variants": {}}
            for variant in args.variants.split(",") if args.variants else VARIANTS:
                # the GEMVs take fp16/bf16 only: the CPU smoke run's fp32 rows go in as bf16
                xv = x.to(bf16) if variant in GEMVS and x.dtype == torch.float32 else x
                if variant in GEMVS and GEMVS[variant][0].unsupported_reason(xv, k, group, 4,
                                                                             False):
                    continue   # more rows than the GEMV takes
                us = call_us([lambda q=q, v=variant, xv=xv: w4a16_gemm(xv, *q, group, 4,
                                                                       variant=v)
                              for q in quant], device)
                read_tb_s = quant_bytes / (us * 1e-6) / 1e12
                # the copy ceiling counts read + write bytes; the GEMM only reads
                row["variants"][variant] = {
                    "us": significant(us), "speedup_vs_bf16": significant(us_dense / us, 3),
                    "weight_read_tb_s": significant(read_tb_s),
                    "of_copy_bandwidth": significant(read_tb_s / copy_tb_s)}
            # what w4a16_gemm runs without a variant (for the smoke run's fp32: "dot")
            row["default"] = default_variant(x, k, group, 4, False)
            if peer is not None and not args.variants:
                # same product as ours (checked here, so a wrong repack cannot time well)
                xb = x.to(bf16)
                error = (tinygemm.int4pack_mm(xb, *peer[0], group).float() -
                         w4a16_gemm(x, *quant[0], group, 4).float()).abs().max().item()
                us = call_us([lambda p=p: tinygemm.int4pack_mm(xb, *p, group) for p in peer],
                             device)
                row["tinygemm"] = {"us": significant(us), "speedup_vs_bf16":
                                   significant(us_dense / us, 3), "max_abs_diff": error,
                                   "of_copy_bandwidth": significant(
                                       quant_bytes / (us * 1e-6) / 1e12 / copy_tb_s)}
            row["best"] = min(row["variants"], key=lambda v: row["variants"][v]["us"])
            rows.append(row)
            if not args.variants:   # all variants: the probes too
                row["probe"] = probe(x, quant8, m, n, group, device, dtype)
            print("gemm", json.dumps(row), flush=True)
    return {"copy_tb_s": copy_tb_s, "group_size": group, "timing": "cuda-graph replays"
            if device == "cuda" else "wall clock", "gemm": rows}


def probe(x, quant8, m: int, n: int, group: int, device: str, dtype) -> dict:
    """The default kernel on 8-bit codes of the same shape, and the zeros + cast around
    a decode call of the old path (dot-zeros; the default decode call has neither)."""
    import torch

    from kubellm.kernels.w4a16_gemm import w4a16_gemm
    us8 = call_us([lambda q=q: w4a16_gemm(x, *q, group, 8) for q in quant8], device)
    # what a dot-zeros decode call spends around the kernel: fp32 zeros and the cast back
    us_around = call_us([lambda: torch.zeros((m, n), dtype=torch.float32,
                                             device=device).to(dtype)], device)
    bytes8 = quant8[0][0].numel() * 4
    return {"8bit_us": significant(us8),
            "8bit_weight_read_tb_s": significant(bytes8 / (us8 * 1e-6) / 1e12),
            "zeros_and_cast_us": significant(us_around)}


def call_us(calls, device: str, replays: int = 20) -> float:
    """Microseconds per call: the calls (one per weight copy) captured in one CUDA graph,
    replayed; on the CPU the median wall time of the first."""
    import torch
    for call in calls:      # autotuning and compilation happen here, outside the graph
        call()
    if device != "cuda":
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            calls[0]()
            times.append(time.perf_counter() - t0)
        return sorted(times)[1] * 1e6
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    us = start.elapsed_time(end) * 1e3 / (replays * len(calls))
    del graph
    return us


def significant(x: float, digits: int = 4) -> float:
    """Rounded to significant digits, not decimals: the CPU smoke run's bandwidths are
    microscopic (interpreted Triton) and must not print as 0."""
    return float(f"{x:.{digits}g}")


def run_part(part: str, out: Path, smoke: bool, engine: str = "", variants: str = "") -> dict:
    path = out / f"w4a16_{part}{'_' + engine if engine else ''}.json"
    cmd = [sys.executable, "-m", "benchmarks.gpu.w4a16", "--part", part, "--out", str(out)]
    cmd += ["--engine", engine] if engine else []
    cmd += ["--variants", variants] if variants else []
    cmd += ["--smoke"] if smoke else []
    subprocess.run(cmd, check=True)
    return json.loads(path.read_text())


def summary(bf16: dict, quantized: dict[str, dict], kernel: dict) -> dict:
    """Each compared engine's decode rates and W against bf16's, memory, and the batch-1 GEMM
    (the default variant: what the engine without switches runs) against the copy rate."""
    rate = lambda e: {r["batch"]: r["decode_tok_s"] for r in e["decode"]}  # noqa: E731
    base, every = rate(bf16), {"bf16": bf16, **quantized}
    batch1 = [r for r in kernel["gemm"] if r["m"] == 1]
    return {"decode_speedup_vs_bf16": {
                name: {b: significant(rate(e)[b] / base[b], 3) for b in base}
                for name, e in quantized.items()},
            "workload_w_ratio_vs_bf16": {
                name: significant(e["workload_w"]["output_tok_s"] /
                                  bf16["workload_w"]["output_tok_s"], 3)
                for name, e in quantized.items()},
            "weight_gib": {name: e["weight_gib"] for name, e in every.items()},
            "kv_blocks": {name: e["num_kv_blocks"] for name, e in every.items()},
            "gemm_batch1_of_copy_bandwidth": {
                f"{r['k']}x{r['n']}": r["variants"][r["default"]]["of_copy_bandwidth"]
                for r in batch1}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--part", choices=["engine", "kernel"])
    ap.add_argument("--variants", default="",
                    help="the GEMM part (--part kernel or the whole run): time only these "
                         "variants (default: all, then tinygemm and the probes too); the "
                         "whole run needs the default one among them")
    ap.add_argument("--engine", choices=list(ENGINES), default="bf16")
    ap.add_argument("--engines", default=DEFAULT_ENGINES,
                    help="the engines to compare with bf16 (comma-separated): "
                         f"{', '.join(e for e in ENGINES if e != 'bf16')}")
    args = ap.parse_args(argv)
    if args.smoke:   # CPU tensors run the Triton kernel in its interpreter
        os.environ.setdefault("TRITON_INTERPRET", "1")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.part == "engine":
        result = engine_part(args)
        (out / f"w4a16_engine_{args.engine}.json").write_text(json.dumps(result, indent=1))
        return 0
    from kubellm.kernels.w4a16_gemm import DEFAULT_VARIANT, GEMVS, VARIANTS
    variants = set(filter(None, args.variants.split(",")))
    if variants - set(VARIANTS):
        ap.error(f"--variants: unknown {sorted(variants - set(VARIANTS))}; choose from "
                 f"{', '.join(VARIANTS)}")
    if args.part == "kernel":
        (out / "w4a16_kernel.json").write_text(json.dumps(kernel_part(args), indent=1))
        return 0
    defaults = {DEFAULT_VARIANT, *GEMVS}
    if variants and not defaults <= variants:   # the summary's GEMM figures are the
        # defaults' (the GEMVs for few rows)
        ap.error(f"--variants: the whole run needs {', '.join(sorted(defaults))} among them")
    names = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = [e for e in names if e not in ENGINES or e == "bf16"]
    if unknown or not names:
        ap.error(f"--engines: unknown {unknown or 'none given'}; choose from "
                 f"{', '.join(e for e in ENGINES if e != 'bf16')}")
    kernel = run_part("kernel", out, args.smoke, variants=args.variants)
    bf16 = run_part("engine", out, args.smoke, "bf16")
    quantized = {e: run_part("engine", out, args.smoke, e) for e in names}
    result = {"summary": summary(bf16, quantized, kernel), "bf16": bf16, **quantized,
              "kernel": kernel}
    (out / "w4a16.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result["summary"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
