#!/usr/bin/env bash
# run from the repository root through the device tool (no carry), working tree 74e98cb. wall 317.5 s.
# OUT=$OUT bash benchmarks/gpu/calls/2026-12-02s11_call30.sh
# 2026-12-02 s11 call 30 (issue 16): the 4-bit GEMV reworked after call 29 (PTX word dots, one
# row of words at a time, several columns per thread) against w4a16_gemm's dot, tinygemm
# and cuBLAS bf16 at 1, 2, 4 rows; ncu's sections for one call of the new kernel and the dot.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call30; mkdir -p "$work"
cp "$0" "$work/command.sh"
timeout 300 python3 -m benchmarks.gpu.gemv --kernels bf16_cublas,int4_dot,int4_gemv,int4_tinygemm --out "$work" > "$work/gemv.log" 2>&1
echo "gemv exit $?"
python3 - "$work/gemv.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("copy TB/s", d["copy_tb_s"])
for r in d["rows"]:
    print(f'{r["k"]:6d}x{r["n"]:<6d} m={r["m"]}', "  ".join(
        f'{k}={v["us"]}us/{v["of_copy_bandwidth"]}' for k, v in r["kernels"].items()))
PY
tail -3 "$work/gemv.log"
timeout 200 ncu --clock-control none --nvtx --nvtx-include "profile/" \
  --section SpeedOfLight --section Occupancy --section LaunchStats \
  --section WarpStateStats --section SchedulerStats --section InstructionStats \
  python3 -m benchmarks.gpu.gemv --profile-only --kernels int4_dot,int4_gemv > "$work/ncu.txt" 2>&1
echo "ncu exit $?"; grep -E "^  [A-Za-z_]|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Executed Ipc A|Issue Slots Busy|Theoretical Occ|Block Limit Reg|Grid Size|Block Size" "$work/ncu.txt" | head -120
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_w4a16_gemm.py \
  > "$work/gpu_tests.log" 2>&1; echo "kernel GPU tests exit $?"; tail -3 "$work/gpu_tests.log"
tar czf "$OUT/call30.tgz" -C /tmp call30
