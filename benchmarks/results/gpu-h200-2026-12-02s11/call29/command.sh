#!/usr/bin/env bash
# run from the repository root through the device tool (no carry), working tree 3f0911a. wall 305.9 s.
# OUT=$OUT bash benchmarks/gpu/calls/2026-12-02s11_call29.sh
# 2026-12-02 s11 call 29 (issues 16 and 20): one to four rows through each weight-read
# bound product (benchmarks/gpu/gemv.py): cuBLAS against kernels/dense_gemv.py in bf16,
# w4a16_gemm's dot and gemv variants against kernels/w4a16_gemv.py and tinygemm in 4-bit;
# then ncu's sections for one call of each at 4096x28672, one row.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call29; mkdir -p "$work"
cp "$0" "$work/command.sh"
timeout 300 python3 -m benchmarks.gpu.gemv --out "$work" > "$work/gemv.log" 2>&1
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
  python3 -m benchmarks.gpu.gemv --profile-only > "$work/ncu.txt" 2>&1
echo "ncu exit $?"; grep -E "^  [A-Za-z_]|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Executed Ipc A|Issue Slots Busy|Theoretical Occ|Block Limit Reg|Grid Size|Block Size" "$work/ncu.txt" | head -120
tar czf "$OUT/call29.tgz" -C /tmp call29
