# 2026-12-01, this repository's 2-core machine (load average ~1 before each), from /work/main:
bash benchmarks/cpu/ab_host_overhead.sh 597da94 e13731c 3 -- --steps 128 --output-kind final_only
bash benchmarks/cpu/ab_host_overhead.sh 597da94 e13731c 3 -- --steps 128 --output-kind cumulative --core-encoding
