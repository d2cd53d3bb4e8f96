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


def test_gemm_tc_smoke_times_its_configs_dot_and_bf16_at_the_rows_asked(tmp_path):
    """The tensor-core GEMM's part (--kernel gemm-tc) at the rows --rows names: its two
    smoke configs (a dot per code position, one dot per chunk), "dot", and bf16's linear;
    gemv-tc only where it takes the rows (up to 16)."""
    run_module("benchmarks.gpu.gemv_tc", "--smoke", "--kernel", "gemm-tc", "--rows", "9,17",
               "--out", tmp_path, timeout=600)
    rows = json.loads((tmp_path / "gemm_tc.json").read_text())["rows"]
    assert [r["m"] for r in rows] == [9, 17]
    for r in rows:
        checked = {"tc_32x8x1x4x1", "tc_32x8x2x4x1x1dot", "dot"} | (
            {"gemv-tc"} if r["m"] <= 16 else set())
        assert set(r["relative_max_error"]) == checked, r
        assert set(r["per"]) == checked | {"bf16"}, r
        assert all(e < 0.02 for e in r["relative_max_error"].values()), r
        assert all(is_figure(v["us"]) for v in r["per"].values())
