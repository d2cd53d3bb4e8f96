#!/usr/bin/env bash
# Session s16, ~200 s: ncu's view of the 4-bit products that miss issue 16's targets, each
# beside bf16 cuBLAS on the same shape: one row at 4096x4096 (gemv, gemv-tc; the GEMV's
# ~4 us of fixed time per call) and 64 rows at 4096x6144 (dot, gemm-tc).
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call52; mkdir -p "$work"
pack() { tar czf "$OUT/call52.tgz" -C /tmp call52; }
profile() {   # NAME SHAPE ROWS KERNELS VARIANTS
  timeout 150 ncu --clock-control none --nvtx --nvtx-include "profile/" \
    --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
    python3 -m benchmarks.gpu.gemv --profile-only --shape "$2" --rows "$3" --kernels "$4" \
    --variants "$5" > "$work/ncu_$1.txt" 2>&1
  echo "ncu $1 exit $?"
  grep -E "^  [A-Za-z_]|^profiled|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Issue Slots Busy|No Eligible|Active Warps Per|Eligible Warps|Warp Cycles Per Issued|Grid Size|Block Size|Stall|L2 Hit" \
    "$work/ncu_$1.txt" | head -90
  pack
}
profile row1 4096x4096 1 bf16_cublas,int4_gemv gemv-tc
profile rows64 4096x6144 64 bf16_cublas,int4_dot gemm-tc
