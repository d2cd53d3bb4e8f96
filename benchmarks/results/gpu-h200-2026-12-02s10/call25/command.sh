# run from the repository root through the device tool, carry [".serve-bench"] (filled
# first by: bash benchmarks/serving/prepare_serve_bench.sh), working tree 181b5e4. wall
# 370.1 s. commit.txt, if present, shows the device's stale git metadata.
OUT=$OUT bash benchmarks/gpu/calls/2026-12-02s10_call25.sh
