# run from the repository root through the device tool (no carry), working tree 5315883,
# on a freshly started machine. wall 73.3 s.
OUT=$OUT bash benchmarks/gpu/calls/2026-12-02s10_call26.sh
