# 2026-12-04 (session s20), this repository's 2-core machine (shared; quiet but for this
# session's own test runs, which never overlapped an A/B), from the wt-host worktree on
# branch host20; 3a6713b = before the session, e96c673 = after every kept runtime change
PYTHON=/work/main/.venv/bin/python bash benchmarks/cpu/ab_host_overhead.sh 3a6713b e96c673 5 -- --steps 128                              # cumulative.txt
PYTHON=/work/main/.venv/bin/python bash benchmarks/cpu/ab_host_overhead.sh 3a6713b e96c673 5 -- --steps 128 --output-kind final_only    # final_only.txt
PYTHON=/work/main/.venv/bin/python bash benchmarks/cpu/ab_host_overhead.sh 3a6713b e96c673 3 -- --steps 128 --no-async-scheduling      # cumulative_no_async.txt
# (both sides run this checkout's host_overhead.py, which since c4d99ba calls the commit's
#  own freeze_startup_heap: 3a6713b's only freezes, e96c673's also raises the young GC
#  threshold, as each engine core process does)
# each change alone, the same script with 3 rounds, streamed and final_only (the commit
# before -> the change; the A/B ran on commits with the same tree whose messages were
# then written, named in each file's first line):
#   ab_outputs_in_loop.txt            3a6713b -> eeae709  outputs built in process's loop
#   ab_young_gc_threshold.txt         eeae709 -> c4d99ba  young GC threshold 700 -> 50,000 (+ --core-encoding)
#   ab_scheduler_no_min_call.txt      bf2e1dd -> a1ba3c6  no min() per request
#   ab_scheduler_no_scheduled_ids.txt a1ba3c6 -> e96c673  no set of the step's ids
# (bf2e1dd: benchmarks.gpu.host_profile freezes the startup heap; not run here)
# dropped (the commit dropped from the branch; its A/B kept):
#   ab_dropped_logprobs_dict.txt      bf2e1dd -> 1753e33  no logprobs dict when no row asked (3 and 5 rounds)
#   ab_dropped_partial_search.txt     b6ea1c3 -> 6bef065  no partial-prefill search after an all-decoding launch
# A/A (3a6713b both sides, 3 rounds, streamed) to size the noise: host 0.807 / 0.803 ms
