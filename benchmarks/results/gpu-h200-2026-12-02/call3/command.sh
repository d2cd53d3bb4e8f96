bash benchmarks/gpu/calls/2026-12-02_call3.sh   # at d20c31b
