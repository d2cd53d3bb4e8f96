# run from the repository root through the device tool (no carry), working tree 0bd8e86
# (the same code as ccac666). wall 182.8 s. The GPU tests failed here (the kernel's scale
# divided by 448 while torch on CUDA multiplies by fp32(1/448)); fixed in 181b5e4.
OUT=$OUT bash benchmarks/gpu/calls/2026-12-02s9_call23.sh
