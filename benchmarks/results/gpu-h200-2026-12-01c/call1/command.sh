STAGES="w4a16" STAGE_SECONDS="w4a16=530" bash benchmarks/gpu/run_all.sh   # at f7fbce7
