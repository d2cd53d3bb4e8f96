# run from the repository root through the device tool (no carry), working tree 3f0911a
# (the script as it was there: git show 3f0911a:benchmarks/gpu/calls/2026-12-02s11_call29.sh).
# wall 305.9 s.
OUT=$OUT bash benchmarks/gpu/calls/2026-12-02s11_call29.sh
