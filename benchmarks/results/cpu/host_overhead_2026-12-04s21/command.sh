# 2026-12-04 (session s21), this repository's 2-core machine (shared: other sessions' test
# runs and benchmarks loaded it, load average 3-4, during ab_objects_new*.txt and
# ab_prefix_view_new.txt; ~1-2 for the rest), from the wt-host21 worktree on branch host21;
# 86e24db = before the session, 2de2d2e = after every kept runtime change
PYTHON=/work/main/.venv/bin/python bash benchmarks/cpu/ab_host_overhead.sh 86e24db 2de2d2e 5 -- --steps 128                              # cumulative.txt
PYTHON=/work/main/.venv/bin/python bash benchmarks/cpu/ab_host_overhead.sh 86e24db 2de2d2e 5 -- --steps 128 --output-kind final_only    # final_only.txt
PYTHON=/work/main/.venv/bin/python bash benchmarks/cpu/ab_host_overhead.sh 86e24db 86e24db 3 -- --steps 128                              # aa_cumulative.txt
# A/A (86e24db both sides, 3 rounds, streamed) to size the noise: host 0.861 / 0.817 ms,
# post-process 0.462 / 0.439
# each change alone, the same script (the commit before -> the change; each file's first
# line names them; d16f690, d34bc1c and 42ae71e are commits with the trees of bb9a72b,
# of the first half of 2de2d2e and of 2de2d2e, their messages rewritten after the A/B):
#   ab_shared_metrics.txt, ab_shared_metrics_final_only.txt   86e24db -> d16f690, 3 rounds
#       one metrics dict per running request, shared by its steps' outputs
#   ab_objects_new.txt, ab_objects_new_final_only.txt, ab_objects_new_2.txt
#                                bb9a72b -> d34bc1c, 3 rounds (loaded machine: inconclusive)
#       the hot row's RequestOutput/CompletionOutput on object.__new__
#   ab_prefix_view_new.txt       d34bc1c -> 42ae71e, 3 rounds (loaded machine: inconclusive)
#       its token PrefixView too
#   ab_objects_new_both.txt      bb9a72b -> 42ae71e, 5 rounds
#       both halves: post-process 0.405 -> 0.366, lower in every round; kept as one commit
