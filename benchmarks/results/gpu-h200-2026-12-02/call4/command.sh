bash benchmarks/gpu/calls/2026-12-02_call4.sh   # at 4fdfadb, carry .serve-bench
