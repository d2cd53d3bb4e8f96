bash benchmarks/gpu/calls/2026-12-02_call5.sh   # at 40ca892
