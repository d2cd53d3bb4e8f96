#!/usr/bin/env bash
# Session s24, ~480 s: (1) the 4-bit GEMV at one to four rows is bound by its issue rate with
# ~2 warps per scheduler (s16 call 52): its grid of 512 programs x 2 warps leaves SMs
# nearly empty. Configs that split K finer (ROWS 1-4 rows of words per program: 2-8x the
# programs) against the two kept (512x8x1x2, 1024x8x1x8), every Llama-3-8B shape;
# (2) s23's call 95 (clocks and power during the Qwen2.5-0.5B chat runs), unrun then.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call98; mkdir -p "$work"
pack() { tar czf "$OUT/call98.tgz" -C /tmp call98; }
cp "$0" "$work/command.sh"
timeout 240 python3 -m benchmarks.gpu.gemv_configs --out "$work" --slack 0.02 --configs \
  512x8x1x2,1024x8x1x8,512x4x1x2,512x2x1x2,512x1x1x2,256x4x1x1,256x2x1x1,256x8x1x1,1024x2x1x4,1024x4x1x8 \
  > "$work/gemv_configs.log" 2>&1
echo "gemv_configs exit $?"; grep -E "^gemv_configs|chosen|compiled .* wall" "$work/gemv_configs.log" | cut -c1-220
python3 - "$work/gemv_configs.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["rows"]:
    u = r["us"]
    print(r["k"], r["n"], r["m"], "best", "x".join(map(str, r["best"])), r["best_us"],
          "| kept:", u.get("512x8x1x2"), u.get("1024x8x1x8"), "|", {k: v for k, v in u.items()
          if k not in ("512x8x1x2", "1024x8x1x8")})
PY
pack
bash benchmarks/gpu/calls/2026-12-04s23_call95.sh
