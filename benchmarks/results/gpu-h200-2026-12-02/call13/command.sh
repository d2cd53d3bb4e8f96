bash benchmarks/gpu/calls/2026-12-02s7_call13.sh   # commit 780bd76 + working tree at the time
