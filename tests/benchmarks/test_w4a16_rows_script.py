"""The W4A16 rows benchmark (where "dequant" overtakes "dot" and "gemm-tc"), shrunk to a
tiny shape on the CPU: every variant must give the reference's product and the figures
must be well formed (their size says nothing on a CPU)."""
import json

from tests.benchmarks.smoke import run_module
from tests.figures import is_figure


def test_w4a16_rows_smoke_checks_and_times_every_variant_and_bf16(tmp_path):
    run_module("benchmarks.gpu.w4a16_rows", "--smoke", "--rows", "3,40", "--out", tmp_path,
               timeout=600)
    result = json.loads((tmp_path / "w4a16_rows.json").read_text())
    assert is_figure(result["dequantize"]["us"])
    assert is_figure(result["dequantize"]["of_copy_bandwidth"])
    assert [(r["k"], r["n"], r["m"]) for r in result["rows"]] == [(64, 128, 3), (64, 128, 40)]
    for r in result["rows"]:
        assert set(r["relative_max_error"]) == {"dot", "gemm-tc", "dequant"}, r
        assert all(e < 0.02 for e in r["relative_max_error"].values()), r
        assert set(r["per"]) == {"bf16", "dot", "gemm-tc", "dequant"}, r
        assert all(is_figure(v["us"]) for v in r["per"].values())
        assert r["best"] in ("dot", "gemm-tc", "dequant")
    assert "dequant_wins_from_rows" in result
