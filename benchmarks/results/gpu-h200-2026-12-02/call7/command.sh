OUT=$OUT bash benchmarks/gpu/calls/2026-12-02_call7.sh   # carry .serve-bench; at 2045bc0
