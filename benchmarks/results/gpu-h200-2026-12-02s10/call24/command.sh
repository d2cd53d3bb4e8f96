# run from the repository root through the device tool, carry [".serve-bench"] (filled
# first by: bash benchmarks/serving/prepare_serve_bench.sh), working tree 0bd8e86 (the code
# of ccac666). wall 320.4 s. commit.txt shows the device's stale git metadata.
OUT=$OUT bash benchmarks/gpu/calls/2026-12-02s10_call24.sh
