# 2026-12-01 (fourth session), this repository's 2-core machine, from /work/main;
# 8d1e8da~1 = before the prepare_inputs change, 8d1e8da = after it
PYTHON=/work/main/.venv/bin/python bash benchmarks/cpu/ab_host_overhead.sh HEAD~1 HEAD 3 -- --steps 128 --output-kind final_only
