bash benchmarks/gpu/calls/2026-12-02s7_call15.sh   # carry .serve-bench; commit 167f413
