#!/usr/bin/env bash
# Session s23, ~560 s: (1) the new W4A16 kernel "dot-tc" (kernels/w4a16_dot_tc.py), each
# config alone at 16-64 rows (split K) and 128-1024 rows (tiles of M), against dot,
# gemm-tc, dequant and bf16; (2) s22's unrun GPU tests of paged_decodes_split (kernel,
# eager and graph; engine with mixed-step graphs); (3) a mixed step with long-context
# decodes (4 decodes of 16,000 keys beside a 512-token prompt), defaults against
# paged_decodes_split.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call91; mkdir -p "$work"
pack() { tar czf "$OUT/call91.tgz" -C /tmp call91; }
cp "$0" "$work/command.sh"
for kernel in dot-tc dot-tc-large; do
  timeout 170 python3 -m benchmarks.gpu.gemv_tc --kernel $kernel --out "$work" \
    > "$work/$kernel.log" 2>&1
  echo "$kernel exit $?"; grep -E "^dot-tc|WRONG" "$work/$kernel.log" | cut -c1-330; pack
done
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu \
  "tests/kernels/test_paged_attention.py::test_gpu_mixed_batch_decodes_apart_llama3_shape" \
  tests/gpu/test_engine_cuda.py -k "decodes_apart" > "$work/split_tests.log" 2>&1
echo "split tests exit $?"; grep -E "passed|failed|FAILED|ERROR" "$work/split_tests.log" | tail -6; pack
for sw in "" paged_decodes_split; do
  name="d4x16000_p1x512_${sw:-defaults}"
  timeout 80 python3 -m benchmarks.gpu.mixed_step --decodes 4 --context 16000 --prompts 1 \
    --prompt 512 --max-model-len 20000 --repeats 4 --top 10 --kernel-switches "$sw" \
    --out "$work/$name" > "$work/$name.log" 2>&1
  echo "$name exit $?"; grep -E "^summary" "$work/$name.log" | cut -c1-400; pack
done
