"""benchmarks/serving/prepare_cost.py runs and writes well-formed figures (their size is
the benchmark's business, not the test's)."""
from __future__ import annotations

import json

from tests.benchmarks.smoke import run_module
from tests.figures import is_figure


def test_prepare_cost_smoke_writes_figures(tmp_path):
    proc = run_module("benchmarks.serving.prepare_cost", "--prompt-tokens", 16,
                      "--bodies", 12, "--repeats", 2, "--out", tmp_path, timeout=300)
    row = json.loads((tmp_path / "prepare_cost.json").read_text())
    assert row["prompt_tokens"] == 16 and row["body_bytes"] > 16
    for key in ("prepare_us", "parse_json_us", "digit_scan_us", "validate_us",
                "prompt_check_us"):
        assert is_figure(row[key]), (key, row)
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == row
