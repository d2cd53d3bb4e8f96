OUT=$OUT bash benchmarks/gpu/calls/2026-12-02_call9.sh   # carry .serve-bench; at 058e158
