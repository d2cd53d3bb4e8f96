# run from the repository root through the device tool (no carry), working tree 0bd8e86
# (the same code as ccac666: only a benchmark script was added). wall 139.6 s.
OUT=$OUT bash benchmarks/gpu/calls/2026-12-02s9_call22.sh
