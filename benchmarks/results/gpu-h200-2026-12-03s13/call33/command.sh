# run from the repository root through the device tool (no carry), working tree 2a705ef.
# wall 470.7 s.
OUT=$OUT bash benchmarks/gpu/calls/2026-12-03s13_call33.sh
