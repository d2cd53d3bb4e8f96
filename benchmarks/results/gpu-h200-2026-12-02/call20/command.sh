# run from the repository root at 2c4ba92 (plus the uncommitted call script) through the
# device tool, carry [".serve-bench"] (filled first by: bash benchmarks/serving/prepare_serve_bench.sh)
OUT=$OUT bash benchmarks/gpu/calls/2026-12-02s9_call20.sh
# the tool returned 8 files; mixed_step_mixed_graphs/* and serve/* were left out (file count);
# their figures are in serve_run.log and mixed_step_mixed_graphs.log
