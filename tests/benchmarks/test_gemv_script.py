"""The one-to-four-row GEMM benchmark, shrunk to tiny shapes on the CPU: it must run,
check every kernel against its reference and write well-formed figures (their size says
nothing on a CPU)."""
import json

from tests.benchmarks.smoke import run_module
from tests.figures import is_figure


def test_gemv_smoke_writes_figures(tmp_path):
    run_module("benchmarks.gpu.gemv", "--smoke", "--out", tmp_path, timeout=600)
    result = json.loads((tmp_path / "gemv.json").read_text())
    assert is_figure(result["copy_tb_s"]) and result["timing"] == "wall clock"
    rows = result["rows"]
    assert {(r["k"], r["n"], r["m"]) for r in rows} == {(256, 64, 1), (256, 64, 4),
                                                        (128, 96, 1), (128, 96, 4)}
    for r in rows:
        assert set(r["kernels"]) == {"bf16_cublas", "int4_dot", "int4_gemv"}
        for k in r["kernels"].values():
            assert is_figure(k["us"]) and is_figure(k["of_copy_bandwidth"])
            assert k["max_abs_diff"] < 0.05   # bf16 outputs of magnitude ~0.2-1
