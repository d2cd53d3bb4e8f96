# run from the repository root through the device tool (no carry), working tree 2cf5030,
# on a freshly started machine. wall 101.1 s.
OUT=$OUT bash benchmarks/gpu/calls/2026-12-02s10_call27.sh
