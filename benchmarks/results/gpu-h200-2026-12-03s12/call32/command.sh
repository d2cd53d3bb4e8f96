# run from the repository root through the device tool (no carry), working tree f8d4644.
# wall 570 s (the tool's limit: rc 124 during the third part, which wrote nothing back).
OUT=$OUT bash benchmarks/gpu/calls/2026-12-02s11_call32.sh
