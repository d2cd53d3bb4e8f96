bash benchmarks/gpu/calls/2026-12-02_call1.sh   # at 034292e, from the repository root
