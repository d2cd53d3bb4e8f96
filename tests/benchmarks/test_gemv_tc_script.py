"""The tensor-core GEMV's config benchmark, shrunk to tiny shapes on the CPU: every config
and the kernels it is compared with must give the reference's product, and the figures
must be well formed (their size says nothing on a CPU)."""
import json

from tests.benchmarks.smoke import run_module
from tests.figures import is_figure


def test_gemv_tc_smoke_checks_and_times_every_config(tmp_path):
    run_module("benchmarks.gpu.gemv_tc", "--smoke", "--out", tmp_path, timeout=600)
    result = json.loads((tmp_path / "gemv_tc.json").read_text())
    rows = result["rows"]
    assert {(r["k"], r["n"], r["m"]) for r in rows} == {(256, 64, 2), (256, 64, 9)}
    for r in rows:
        # two configs (groups of 64: chunks of 8 rows of words), dot, and the FFMA GEMV
        # where it takes the rows
        expected = {"tc_32x8x1x4", "tc_32x8x2x4", "dot"} | ({"gemv"} if r["m"] <= 4 else set())
        assert set(r["per"]) == set(r["relative_max_error"]) == expected, r
        assert all(e < 0.02 for e in r["relative_max_error"].values()), r
        assert all(is_figure(v["us"]) and is_figure(v["of_copy_bandwidth"])
                   for v in r["per"].values())
        assert r["best_tc"] in r["per"]
