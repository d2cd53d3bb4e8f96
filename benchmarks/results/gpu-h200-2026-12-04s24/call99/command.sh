#!/usr/bin/env bash
# Session s24, ~420 s: (1) call 98's one-warp GEMV config won at one row; more one-warp
# shapes of program (64-512 columns, 4-16 rows of words) against it and the two kept;
# (2) the W4A16 kernels' and the quantized engine's GPU tests with the third config.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call99; mkdir -p "$work"
pack() { tar czf "$OUT/call99.tgz" -C /tmp call99; }
cp "$0" "$work/command.sh"
timeout 200 python3 -m benchmarks.gpu.gemv_configs --out "$work" --slack 0.02 --configs \
  512x8x1x2,1024x8x1x8,256x8x1x1,128x8x1x1,128x16x1x1,512x8x1x1,256x16x1x1,128x4x1x1,64x8x1x1,512x16x1x1 \
  > "$work/gemv_configs.log" 2>&1
echo "gemv_configs exit $?"; grep -E "chosen|compiled .* wall" "$work/gemv_configs.log" | cut -c1-220
python3 - "$work/gemv_configs.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["rows"]:
    print(r["k"], r["n"], r["m"], "best", "x".join(map(str, r["best"])), r["best_us"], r["us"])
print("chosen", d["chosen"], d["compile_s"])
PY
pack
timeout 330 python3 -m pytest -v -rfEs -p no:cacheprovider -m gpu tests/kernels/test_w4a16_gemm.py \
  tests/gpu/test_quantized_cuda.py > "$work/gpu_tests.log" 2>&1
echo "GPU tests exit $?"; grep -E "FAILED|ERROR|passed|failed" "$work/gpu_tests.log" | tail -8 | cut -c1-300
pack
