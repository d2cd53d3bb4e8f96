bash benchmarks/gpu/calls/2026-12-02s7_call14.sh   # carry .serve-bench; commit 2a89168
