# run from the repository root through the device tool (no carry), working tree 505aeb9.
# wall 400.8 s; both parts ran past their 200 s limits (exit 124): see the README beside
# this folder.
OUT=$OUT bash benchmarks/gpu/calls/2026-12-02s11_call31.sh
