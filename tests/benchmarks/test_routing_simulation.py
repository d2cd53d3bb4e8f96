"""The routing simulation's script runs (--smoke) and writes well-formed figures."""
import json
import math
import subprocess
import sys

from tests.benchmarks.smoke import run_module
from tests.paths import ROOT


def test_smoke_run_writes_a_figure_and_a_plot(tmp_path):
    run_module("benchmarks.routing.simulate", "--smoke", "--out", tmp_path)
    summary = json.loads((tmp_path / "routing_simulation.json").read_text())
    results = summary["results"]
    assert {r["policy"] for r in results} == {"round-robin", "load", "epp"}
    assert len({r["rate"] for r in results}) == 2
    for r in results:
        assert r["requests"] == summary["workload"]["num_requests"]
        for key in ("ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "output_tok_s"):
            assert math.isfinite(r[key]) and r[key] > 0, key
        assert r["ttft_p50_ms"] <= r["ttft_p90_ms"] <= r["ttft_p99_ms"]
        assert 0.0 <= r["prefix_hit_rate"] <= 1.0
    png = (tmp_path / "routing_simulation.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000


def test_bad_rates_are_refused(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "benchmarks.routing.simulate", "--smoke",
                           "--rates", "0", "--out", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--rates" in proc.stderr
