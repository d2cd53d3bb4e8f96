OUT=$OUT bash benchmarks/gpu/calls/2026-12-02_call10.sh   # carry .serve-bench; at f234ee0
