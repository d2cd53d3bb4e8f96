#!/usr/bin/env bash
# Session s23, ~330 s: (1) gemm-tc's configs at 32-64 rows, with PREFETCH configs (the
# next chunk's words, scales and biases loaded before this chunk's MMAs) beside the
# earlier ones, against dot and bf16; (2) call 91's failed run again after the config
# fix: a mixed step with long-context decodes (4 decodes of 16,000 keys beside a 512-token
# prompt), defaults against paged_decodes_split.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call92; mkdir -p "$work"
pack() { tar czf "$OUT/call92.tgz" -C /tmp call92; }
cp "$0" "$work/command.sh"
timeout 200 python3 -m benchmarks.gpu.gemv_tc --kernel gemm-tc --rows 32,48,64 --out "$work" \
  > "$work/gemm-tc.log" 2>&1
echo "gemm-tc exit $?"; grep -E "^gemm-tc|WRONG" "$work/gemm-tc.log" | cut -c1-300; pack
python3 - "$work/gemm_tc.json" <<'PY'
import json, sys
for row in json.load(open(sys.argv[1]))["rows"]:
    per = row["per"]
    pf = min((k for k in per if k.endswith("pf")), key=lambda k: per[k]["us"], default=None)
    rest = min((k for k in per if k.startswith("tc_") and not k.endswith("pf")),
               key=lambda k: per[k]["us"], default=None)
    if pf and rest:
        print("prefetch", row["k"], row["n"], row["m"], pf, per[pf]["us"], rest, per[rest]["us"],
              "dot", per.get("dot", {}).get("us"), "bf16", per.get("bf16", {}).get("us"))
PY
for sw in "" paged_decodes_split; do
  name="d4x16000_p1x512_${sw:-defaults}"
  timeout 80 python3 -m benchmarks.gpu.mixed_step --decodes 4 --context 16000 --prompts 1 \
    --prompt 512 --max-model-len 20000 --repeats 4 --top 10 --kernel-switches "$sw" \
    --out "$work/$name" > "$work/$name.log" 2>&1
  echo "$name exit $?"; grep -E "^summary" "$work/$name.log" | cut -c1-400; pack
done
