# run from the repository root through the device tool (no carry), working tree 74e98cb.
# wall 317.5 s.
OUT=$OUT bash benchmarks/gpu/calls/2026-12-02s11_call30.sh
