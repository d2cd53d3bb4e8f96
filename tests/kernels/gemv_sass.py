"""SASS instruction counts of the 4-bit GEMV kernel (kernels/w4a16_gemv.py) built for the
H200 (sm_90) on a machine without one, through Triton's bundled ptxas
(sass_for_hopper.py beside this file): per config, row count (BLOCK_M) and with the words'
dots in inline PTX or in Triton's own code. What a thread's instructions cost per weight
is what bounds the kernel (ncu, call 29: issuing instructions, not the read).

    python -m tests.kernels.gemv_sass            # the kernel's autotuning configs

A tool beside the tests (benchmarks never import tests), as sass_for_hopper is.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.paths import ROOT

_NAMES = ["x_ptr", "qw_ptr", "scale_ptr", "bias_ptr", "out_ptr", "ws_ptr", "count_ptr",
          "M", "N", "K", "M_BUCKET", "stride_xm", "stride_qk", "stride_sg", "stride_om",
          "stride_wm"]
_TYPES = ["*bf16", "*i32", "*bf16", "*bf16", "*bf16", "*fp32", "*i32"] + ["i32"] * 9


def _launch_spec(constexprs: dict, warps: int, **where) -> dict:
    """sass_for_hopper's spec of a launch with these constants, bf16 tensors, and the
    arguments Triton specializes as divisible by 16 (pointers and strides)."""
    return {"signature": {**dict(zip(_NAMES, _TYPES)), **{c: "constexpr" for c in constexprs}},
            "constexprs": constexprs, "num_warps": warps, **where,
            "divisible_by_16": [i for i, n in enumerate(_NAMES) if n not in ("M", "M_BUCKET")]}


def spec(block_m: int, block_n: int, rows: int, warps: int, ptx: bool = True) -> dict:
    """The FFMA GEMV with bf16 activations, groups of 128, one chunk, N a multiple of the
    tile."""
    return _launch_spec({"GROUP_SIZE": 128, "BLOCK_M": block_m, "BLOCK_N": block_n,
                         "ROWS": rows, "CHUNKS": 1, "EVEN_N": True, "PTX": ptx}, warps)


def tc_spec(block_m: int, block_n: int, rows: int, chunks: int, warps: int) -> dict:
    """The same for the tensor-core GEMV (kernels/w4a16_gemv_tc.py), bf16."""
    import torch

    from kubellm.kernels.w4a16_gemv_tc import _OFFSET, _PAIR_PTX
    return _launch_spec({"GROUP_SIZE": 128, "BLOCK_M": block_m, "BLOCK_N": block_n,
                         "ROWS": rows, "CHUNKS": chunks, "EVEN_N": True,
                         "PAIR_PTX": _PAIR_PTX[torch.bfloat16],
                         "OFFSET": _OFFSET[torch.bfloat16], "PTX": True}, warps,
                        kernel="_gemv_tc_kernel", module="kubellm.kernels.w4a16_gemv_tc")


def gemm_tc_spec(block_m: int, block_n: int, chunks: int, warps: int, stages: int = 1) -> dict:
    """The tensor-core GEMM (kernels/w4a16_gemm_tc.py), bf16, groups of 128."""
    import torch

    from kubellm.kernels.w4a16_gemm_tc import _WEIGHT_ASM
    return _launch_spec({"GROUP_SIZE": 128, "BLOCK_M": block_m, "BLOCK_N": block_n,
                         "ROWS": 16, "CHUNKS": chunks, "SPLIT": True, "ONE_DOT": False,
                         "EVEN_N": True,
                         "WEIGHT_ASM": _WEIGHT_ASM[torch.bfloat16], "PTX": True}, warps,
                        kernel="_gemm_tc_kernel", module="kubellm.kernels.w4a16_gemm_tc",
                        num_stages=stages)


def kernel_and_loop_opcodes(launch_spec: dict) -> tuple[dict[str, int], dict[str, int]]:
    """Opcode counts of the whole kernel and of its loop body (its longest), once."""
    both = opcodes({**launch_spec, "with_loop": True})
    return both["kernel"], both["loop"]


def opcodes(launch_spec: dict) -> dict[str, int]:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.kernels.sass_for_hopper",
         launch_spec.get("module", "kubellm.kernels.w4a16_gemv"),
         launch_spec.get("kernel", "_gemv_kernel"), json.dumps(launch_spec)],
        capture_output=True, text=True,
        timeout=300, cwd=ROOT, env={**os.environ, "TRITON_INTERPRET": "0"})
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(proc.stdout)


def words_per_thread(block_n: int, rows: int, warps: int) -> int:
    return rows * block_n // (32 * warps)


def main() -> int:
    from kubellm.kernels.w4a16_gemv import _CONFIGS
    for block_n, rows, _, warps in _CONFIGS:
        for block_m in (1, 2, 4):
            for ptx in (True, False):
                ops = opcodes(spec(block_m, block_n, rows, warps, ptx))
                weights = 8 * words_per_thread(block_n, rows, warps)
                row = {"config": f"{block_n}x{rows}x1x{warps}", "rows": block_m, "ptx": ptx,
                       "instructions_per_weight": round(sum(ops.values()) / weights, 2),
                       **{op: ops.get(op, 0) for op in ("LOP3", "FFMA", "SHF", "FADD")}}
                print(json.dumps(row), flush=True)
    from kubellm.kernels.w4a16_gemv_tc import _CONFIGS as TC_CONFIGS
    for block_n, chunks, warps in TC_CONFIGS:
        for block_m in (8, 16):
            ops = opcodes(tc_spec(block_m, block_n, 16, chunks, warps))
            weights = 8 * words_per_thread(block_n, 16 * chunks, warps)
            print(json.dumps({"tc_config": f"{block_n}x16x{chunks}x{warps}", "rows": block_m,
                              "instructions_per_weight": round(sum(ops.values()) / weights, 2),
                              **{op: ops.get(op, 0) for op in ("HGMMA", "LOP3", "STL", "LDS")}}),
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
