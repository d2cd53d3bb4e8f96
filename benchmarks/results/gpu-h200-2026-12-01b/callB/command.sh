#!/usr/bin/env bash
export PYTHONPATH=$PWD/runtime:$PWD/kernels:$PWD/operator TRITON_INTERPRET=0 NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
timeout -k 5 100 python3 -m pytest -m gpu "tests/runtime/worker/test_sampler.py::test_on_cuda_seeds_masks_and_penalties_hold" "tests/gpu/test_moe_cuda.py::test_bf16_top5_agreement_with_transformers[eager-mixtral-8x7b]" -p no:cacheprovider --tb=short -q 2>&1 | grep -v "Warn\|warn\|Writing" | grep -B2 -A25 "FAILURES\|passed\|failed" | cut -c1-400 | head -70
timeout -k 5 200 python3 -m benchmarks.gpu.w4a16 --part kernel --out $OUT 2>&1 | grep -v Warn > $OUT/w4a16_kernel.log
python3 - <<'PY'
import json, os
d = json.load(open(os.environ["OUT"] + "/w4a16_kernel.json"))
for r in d["gemm"]:
    print(r["k"], r["n"], r["m"], "bf16", r["bf16_linear_us"], {v: (x["us"], x["of_copy_bandwidth"]) for v, x in r["variants"].items()})
PY
tail -3 $OUT/w4a16_kernel.log
