"""benchmarks/serving/client_dispatch.py runs and writes well-formed figures (their size
is the benchmark's business, not the test's)."""
from __future__ import annotations

import json

from tests.benchmarks.smoke import run_module
from tests.figures import is_figure


def test_client_dispatch_smoke_writes_figures(tmp_path):
    proc = run_module("benchmarks.serving.client_dispatch", "--requests", 4,
                      "--processes", "1,2", "--repeats", 2, "--prompt-tokens", 8,
                      "--out", tmp_path, timeout=300)
    rows = json.loads((tmp_path / "client_dispatch.json").read_text())
    assert [row["processes"] for row in rows] == [1, 2]
    for row in rows:
        assert row["requests"] == 4
        for key in ("first_body_ms_p50", "last_body_ms_p50", "last_body_vs_one_process"):
            assert is_figure(row[key]), (key, row)
        assert row["first_body_ms_p50"] <= row["last_body_ms_p50"]
    assert proc.stdout.count("dispatch {") == 2
