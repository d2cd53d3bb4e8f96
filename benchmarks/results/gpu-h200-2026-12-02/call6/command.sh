OUT=$OUT bash benchmarks/gpu/calls/2026-12-02_call6.sh   # carry .serve-bench; at 94a5938
