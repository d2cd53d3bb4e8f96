# 2026-12-02, this repository's 2-core machine (loaded: a full test run beside it), from
# the s5-host worktree; 7e22bd7 = before, 699cbf7 = after every kept change
PYTHON=/work/main/.venv/bin/python bash benchmarks/cpu/ab_host_overhead.sh 7e22bd7 699cbf7 5 -- --steps 128 --output-kind final_only
# each change alone, the same script with 3 rounds (HEAD~1 HEAD at the time):
#   ab_allocate_skip.txt               7e22bd7 -> 635fb45
#   ab_decode_rows.txt                 635fb45 -> cb90df7
#   ab_landed_gate.txt                 cb90df7 -> 65818a1
#   ab_dropped_engine_tables_map.txt   cb90df7 -> (dropped commit: the engine's table list via map)
#   ab_dropped_partial_in_loop.txt     65818a1 -> (dropped commit: prefills deferred in the hot loop)
#   ab_dropped_skip_prefill_search.txt 699cbf7 -> (dropped commit: no prefill search after an all-sampling step)
