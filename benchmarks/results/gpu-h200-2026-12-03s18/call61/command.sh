#!/usr/bin/env bash
# Session s18, ~300 s: the GPU tests on the fixed decode tile config and LONG_SPLITS 4 --
# the paged-attention file (its long-split test now compares at DECODE_CONFIG; a new one
# checks that decode calls do not depend on what the autotuner chose before), the engine
# against transformers with long-split decode batches and with Llama-3 graphs -- then the
# prefill-shaped calls' tile configs (and what the autotuner keeps after zero-query
# warm-ups, as the mixed-step graphs make), then the decode-step ablation at batch 1 and
# 256 again (four splits).
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call61; mkdir -p "$work"
pack() { tar czf "$OUT/call61.tgz" -C /tmp call61; }
cp "$0" "$work/command.sh"
timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_paged_attention.py \
  > "$work/gpu_tests.log" 2>&1
echo "paged GPU tests exit $?"; tail -2 "$work/gpu_tests.log"; pack
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_engine_cuda.py \
  -k "long_split or (transformers and llama3 and graphs)" > "$work/engine_tests.log" 2>&1
echo "engine GPU tests exit $?"; tail -2 "$work/engine_tests.log"; pack
timeout 120 python3 -m benchmarks.kernels.bench_paged_attention --prefill-tiles --out "$work" \
  > "$work/prefill_tiles.log" 2>&1
echo "prefill tiles exit $?"; cat "$work/prefill_tiles.log" | cut -c1-600; pack
timeout 200 python3 -m benchmarks.gpu.decode_ablation --batches 1,256 --out "$work" \
  > "$work/decode_ablation.log" 2>&1; echo "ablation exit $?"
grep -E '^\{"variant"' "$work/decode_ablation.log" | python3 -c "
import json, sys
for line in sys.stdin:
    v = json.loads(line)
    print(v['variant'], v.get('batch1_ms'), v.get('batch256_ms'), v.get('batch256_max_rel_diff'))"
pack
