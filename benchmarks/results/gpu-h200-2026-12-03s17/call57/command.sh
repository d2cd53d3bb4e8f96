#!/usr/bin/env bash
# Session s17, ~420 s: decode_long_split on by default on Hopper (8 splits of at least
# 1,024 keys). The engine against transformers with 40 sequences decoding at once, then
# the chat workload over three seeds with the defaults and with the switch off, then
# workload W with the defaults and with it off.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call57; mkdir -p "$work"
pack() { tar czf "$OUT/call57.tgz" -C /tmp call57; }
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_engine_cuda.py \
  -k "long_split or (transformers and llama3 and graphs)" > "$work/gpu_tests.log" 2>&1
echo "GPU tests exit $?"; tail -2 "$work/gpu_tests.log"; pack
timeout 300 python3 -m benchmarks.gpu.varlen --seeds 0,1,2 --skip-old-defaults \
  --with-switches decode_long_split=off --out "$work" > "$work/varlen.log" 2>&1
echo "varlen exit $?"; grep -E "fraction" "$work/varlen.log"; pack
timeout 150 python3 -m benchmarks.gpu.w_switches --with decode_long_split=off \
  --out "$work" > "$work/w_switches.log" 2>&1
echo "W A/B exit $?"; grep -E "^\{|over the defaults" "$work/w_switches.log"; pack
