"""The GPU stage ``mp`` (benchmarks/gpu/mp_engine.py) on the CPU: its --smoke mode runs
the same engines one after another (single-process, multi-process at one rank on gloo,
single-process again) on a tiny shape, so a script error cannot first show up on the
GPU. It checks the figures are written and well formed, never their size."""
import json

from tests.benchmarks.smoke import run_module
from tests.figures import is_figure


def test_smoke_run_writes_both_engines_figures(tmp_path):
    run_module("benchmarks.gpu.mp_engine", "--smoke", "--out", tmp_path)
    result = json.loads((tmp_path / "mp_engine.json").read_text())
    assert [e["backend"] for e in result["engines"]] == ["uni", "mp", "uni"]
    assert [len(e["output_tok_s"]) for e in result["engines"]] == [2, 2, 1]
    assert all(is_figure(t) for e in result["engines"] for t in e["output_tok_s"])
    summary = result["summary"]
    assert summary["tokens_agree"] is True      # the same dummy weights, greedy
    assert is_figure(summary["mp_over_uni"]) and set(summary["best_output_tok_s"]) == {"uni", "mp"}
    assert summary["memory_vs_first_shutdown_mib"] is None   # no GPU memory on the CPU
    assert "mp / uni (best runs)" in (tmp_path / "mp_engine.md").read_text()
