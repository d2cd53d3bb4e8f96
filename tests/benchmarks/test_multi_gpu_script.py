"""The multi-GPU benchmark (benchmarks/gpu/multi_gpu.py) on the CPU: its --smoke mode runs
the GPU path with gloo, a tiny model and two ranks, so a script error cannot first show
up on a lent multi-GPU machine; and the top-5 rule it judges TP/PP by."""
from __future__ import annotations

import json
import os

from benchmarks.common.agreement import first_disagreement
from tests.benchmarks.smoke import run_module
from tests.figures import is_figure


def test_smoke_run_checks_measures_and_skips(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "KUBELLM_DEVICE": "cpu"}
    run_module("benchmarks.gpu.multi_gpu", "--smoke", "--out", out,
               "--work", tmp_path / "work", timeout=240, env=env)
    result = json.loads((out / "multi_gpu.json").read_text())
    configs, rows = result["configs"], result["rows"]
    assert set(configs) == {"tp1", "tp2", "pp2", "70b-tp2"}
    for name in ("tp2", "pp2"):
        assert configs[name]["agreement"]["top5_agree"] is True, configs[name]["agreement"]
        assert configs[name]["agreement"]["num_prompts"] == 4
    for name in configs:
        assert configs[name]["w"]["output_tokens"] == 8 * 6, name
    assert rows["tp1"]["efficiency"] == 1.0 and is_figure(rows["tp2"]["efficiency"])
    assert "check" not in configs["70b-tp2"]       # dummy weights: W only
    assert rows["70b-tp2"]["efficiency"] is None   # another model than tp1's
    assert is_figure(rows["tp2"]["all_reduce_ms"]) and rows["tp2"]["send_recv_ms"] is None
    assert is_figure(rows["pp2"]["send_recv_ms"]) and rows["pp2"]["all_reduce_ms"] is None
    ranks = configs["pp2"]["w"]["comm_by_rank"]
    assert [r["pp_rank"] for r in ranks] == [0, 1] and ranks[0]["timed_steps"] > 0
    assert set(result["skipped"]) == {"tp4", "tp8", "tp4pp2"}
    assert "needs 8 GPUs (TP 4 x PP 2), 2 visible" in result["skipped"]["tp4pp2"]
    table = (out / "multi_gpu.md").read_text()
    assert "| pp2 | 2 | agree (4/4 identical) |" in table and "skipped tp8" in table


def test_top5_rule_stops_at_the_first_divergence():
    tops = [{1, 2}, {3, 4}, {5}]
    assert first_disagreement([1, 3, 5], tops, [1, 3, 5], tops) is None
    # diverging at step 1, each token in the other's top: later steps are not compared
    assert first_disagreement([1, 3, 9], tops, [1, 4, 8], [{1}, {3, 4}, {8}]) is None


def test_top5_rule_names_the_step_and_side_that_broke_it():
    msg = first_disagreement([1, 3], [{1}, {3}], [1, 4], [{1}, {4}], names=("tp2", "tp1"))
    assert msg == "step 1: tp2's token 3 not in tp1's top-N [4]"
    msg = first_disagreement([1, 3], [{1}, {3}], [1, 4], [{1}, {3, 4}], names=("tp2", "tp1"))
    assert msg == "step 1: tp1's token 4 not in tp2's top-N [3]"
