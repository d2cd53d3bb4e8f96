STAGES="serve small-model" STAGE_SECONDS="serve=360 small-model=110" bash benchmarks/gpu/run_all.sh   # carry .serve-bench, at 30a0b9b-era main (9be1b2b + results)
