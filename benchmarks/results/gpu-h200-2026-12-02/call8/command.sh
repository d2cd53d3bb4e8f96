OUT=$OUT bash benchmarks/gpu/calls/2026-12-02_call8.sh   # carry .serve-bench; at a10b941
