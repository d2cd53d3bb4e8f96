#!/usr/bin/env bash
# One to four rows through each weight-read-bound product (benchmarks/gpu/gemv.py), a
# summary line per shape and row count, then ncu's sections for one call of each named
# kernel at 4096x28672, one row. Used by the dated call scripts beside it:
#   bash benchmarks/gpu/calls/gemv_probe.sh WORK_DIR [KERNELS] [PROFILED_KERNELS]
# from the repository root (KERNELS: gemv.py's names, comma-separated; empty: all).
# Writes WORK_DIR/gemv.json, gemv.log and ncu.txt.
work=${1:?usage: gemv_probe.sh WORK_DIR [KERNELS] [PROFILED_KERNELS]}
kernels=${2:-}; profiled=${3:-}
timeout 300 python3 -m benchmarks.gpu.gemv ${kernels:+--kernels "$kernels"} --out "$work" \
  > "$work/gemv.log" 2>&1
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
  python3 -m benchmarks.gpu.gemv --profile-only ${profiled:+--kernels "$profiled"} \
  > "$work/ncu.txt" 2>&1
echo "ncu exit $?"; grep -E "^  [A-Za-z_]|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Executed Ipc A|Issue Slots Busy|Theoretical Occ|Block Limit Reg|Grid Size|Block Size" "$work/ncu.txt" | head -120
