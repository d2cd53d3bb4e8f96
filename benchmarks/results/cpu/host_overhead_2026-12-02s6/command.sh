# 2026-12-02 (session s6), this repository's 2-core machine (shared, loaded), from the
# s6-host worktree; 2ed44df = before the session, HEAD = 51c788f (after every kept change)
PYTHON=/work/main/.venv/bin/python bash benchmarks/cpu/ab_host_overhead.sh 2ed44df HEAD 5 -- --steps 128 --output-kind final_only   # final_only.txt
PYTHON=/work/main/.venv/bin/python bash benchmarks/cpu/ab_host_overhead.sh 2ed44df HEAD 5 -- --steps 128 --output-kind cumulative   # cumulative.txt (and 7 rounds more)
# (this checkout's host_overhead.py runs on both sides: both freeze the startup heap;
#  the freeze alone: ab_gc_freeze_cumulative.txt, one commit with and without --no-gc-freeze)
# each change alone, the same script with 5 rounds (the commit before -> the change):
#   ab_gc_freeze_cumulative.txt           4170a50 with --no-gc-freeze -> without (7dd7841)
#   ab_kv_decode_path.txt                 7dd7841 -> cda3269
#   ab_rows_in_order.txt                  cda3269 -> 0a010e4
#   ab_output_columns.txt                 0a010e4 -> d600d58
#   ab_positional_outputs_cumulative.txt  10ca633 -> 0d7ee0c (cumulative)
# dropped (the commit reset; its A/B kept):
#   ab_dropped_land_by_row.txt            0a010e4 -> adbada4
#   ab_dropped_no_scheduled_ids.txt       d600d58 -> a4c3d3e
#   ab_dropped_single_dispatch_cumulative.txt  73a18cd -> 5c36b16 (cumulative)
#   ab_dropped_partial_flag.txt           73a18cd -> 6337b57
# A/A (0a010e4 both sides, 4 rounds) to size the noise: phases within +-0.03 ms per run
