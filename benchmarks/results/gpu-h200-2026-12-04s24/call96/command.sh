#!/usr/bin/env bash
# Session s24, ~420 s: does prefetching each next linear layer's weights into L2 (on a side
# stream, beside the norms, rotary, attention and activation that leave device memory idle)
# bring small decode steps closer to their weight-read floor? (1) benchmarks.gpu.l2_prefetch:
# bf16 and 4-bit Llama-3-8B shape, batch 1 / 4 / 16, context 512, off / eight variants /
# off again; (2) the kernel's GPU tests and the engine's top-5 test with the switch on.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call96; mkdir -p "$work"
pack() { tar czf "$OUT/call96.tgz" -C /tmp call96; }
cp "$0" "$work/command.sh"
timeout 300 python3 -m benchmarks.gpu.l2_prefetch --out "$work/l2" > "$work/l2_prefetch.log" 2>&1
echo "l2_prefetch exit $?"; grep -E "^(bf16|4bit) batch" "$work/l2_prefetch.log" | cut -c1-200; pack
timeout 200 python3 -m pytest -v -rfEs -p no:cacheprovider tests/kernels/test_l2_prefetch.py \
  "tests/gpu/test_engine_cuda.py::test_bf16_top5_agreement_with_l2_prefetch" \
  > "$work/gpu_tests.log" 2>&1
echo "GPU tests exit $?"; grep -E "FAILED|ERROR|passed|failed" "$work/gpu_tests.log" | tail -8 | cut -c1-300
pack
