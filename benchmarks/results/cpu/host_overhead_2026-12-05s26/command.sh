#!/usr/bin/env bash
# Session s26: the engine core's host work per decode step at batch 256 (schedule,
# prepare, post-process and delta encoding: --core-encoding), one thread, CPU clock,
# interleaved pairs of commits (benchmarks/cpu/ab_host_overhead.sh, this checkout's
# host_overhead.py in both trees).
#  - c83791e (steady rows' compact deltas) against 4c7a708 (s25's last commit);
#  - 0c4438d (on_launch for steady steps) against 71b1edb (the step before it);
#  - 21e588b (the plan goes on past finishes) against ed76507, requests finishing along
#    the run (--output-spread);
#  - the session: 4c7a708 against 21e588b, both ways. From 71b1edb on, host_ms counts the
#    block tables' list and Scheduler.on_launch (~0.1 ms here) that 4c7a708 leaves out.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
out=benchmarks/results/cpu/host_overhead_2026-12-05s26
ab() { PYTHON=$PWD/.venv/bin/python bash benchmarks/cpu/ab_host_overhead.sh "$@"; }
ab 4c7a708 c83791e 3 -- --batch 256 --steps 256 --core-encoding > "$out/ab_4c7a708_c83791e.log" 2>&1
ab 71b1edb 0c4438d 3 -- --batch 256 --steps 256 --core-encoding > "$out/ab_71b1edb_0c4438d.log" 2>&1
ab ed76507 21e588b 3 -- --batch 256 --steps 256 --core-encoding --output-spread \
  > "$out/ab_ed76507_21e588b_output_spread.log" 2>&1
ab 4c7a708 21e588b 3 -- --batch 256 --steps 256 --core-encoding > "$out/ab_4c7a708_21e588b.log" 2>&1
ab 4c7a708 21e588b 3 -- --batch 256 --steps 256 --core-encoding --output-spread \
  > "$out/ab_4c7a708_21e588b_output_spread.log" 2>&1
#  - 5806a91 (the same block tables handed on: same_rows / same_tables) against 21e588b,
#    equal prompts (most steps: no table grows) and --context-spread (some row grows in
#    most steps: only the list is saved)
ab 21e588b 5806a91 3 -- --batch 256 --steps 256 --core-encoding > "$out/ab_21e588b_5806a91.log" 2>&1
ab 21e588b 5806a91 3 -- --batch 256 --steps 256 --core-encoding --context-spread \
  > "$out/ab_21e588b_5806a91_context_spread.log" 2>&1
#  - the session to its last code commit: 4c7a708 against 5806a91, both ways
ab 4c7a708 5806a91 3 -- --batch 256 --steps 256 --core-encoding > "$out/ab_4c7a708_5806a91.log" 2>&1
ab 4c7a708 5806a91 3 -- --batch 256 --steps 256 --core-encoding --output-spread \
  > "$out/ab_4c7a708_5806a91_output_spread.log" 2>&1
