# run from the repository root through the device tool, carry [".serve-bench"] (filled first
# by: bash benchmarks/serving/prepare_serve_bench.sh). The working tree was 667f2f7; the
# commit.txt the script wrote says 2c4ba92 because the device machine's git metadata lagged.
# The script has since been changed to leave the fp8_quant_kernel test to call 23.
OUT=$OUT bash benchmarks/gpu/calls/2026-12-02s9_call21.sh
