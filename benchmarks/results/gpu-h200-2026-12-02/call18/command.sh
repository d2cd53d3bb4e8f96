# run from the repository root at 2c4ba92 through the device tool, carry [".serve-bench"]
# (filled first by: bash benchmarks/serving/prepare_serve_bench.sh)
OUT=$OUT bash benchmarks/gpu/calls/2026-12-02s8_call18.sh
