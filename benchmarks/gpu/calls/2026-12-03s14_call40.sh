#!/usr/bin/env bash
# Session s14, ~150 s: the decode chain (benchmarks/gpu/decode_chain.py) a third time: call
# 39's check compared 128 GEMMs' outputs (0.026 apart, PDL against plain) without knowing
# how far two plain runs lie apart; it now checks one layer and reports both.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; work=/tmp/call40; mkdir -p "$work"
pack() { tar czf "$OUT/call40.tgz" -C /tmp call40; }
timeout 240 python3 -m benchmarks.gpu.decode_chain --out "$work" > "$work/decode_chain.log" 2>&1
echo "decode_chain exit $?"; tail -40 "$work/decode_chain.log"; pack
