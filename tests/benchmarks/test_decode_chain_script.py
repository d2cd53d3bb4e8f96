"""The decode-chain benchmark (a step's projections chained, bf16 against 4-bit), shrunk
to two tiny layers on the CPU: it must run and write well-formed figures."""
import json

from tests.benchmarks.smoke import run_module
from tests.figures import is_figure


def test_decode_chain_smoke_writes_figures(tmp_path):
    run_module("benchmarks.gpu.decode_chain", "--smoke", "--out", tmp_path, timeout=600)
    result = json.loads((tmp_path / "decode_chain.json").read_text())
    assert result["layers"] == 2 and [r["m"] for r in result["rows"]] == [1, 2]
    assert result["bytes_per_layer"]["4bit"] < result["bytes_per_layer"]["bf16"] / 3
    for r in result["rows"]:
        assert set(r["variants"]) == {"bf16", "4bit", "bf16+elementwise", "4bit+elementwise"}
        assert all(is_figure(v["us_per_layer"]) and is_figure(v["of_copy_bandwidth"])
                   for v in r["variants"].values())
        assert set(r["bf16_over_4bit"]) == {"4bit", "4bit+elementwise"}


def test_decode_chain_smoke_with_the_gemv_variant(tmp_path):
    run_module("benchmarks.gpu.decode_chain", "--smoke", "--out", tmp_path, "--rows", "1,2",
               "--variants", "bf16,4bit,bf16-gemv", timeout=600)
    rows = json.loads((tmp_path / "decode_chain.json").read_text())["rows"]
    for r in rows:
        assert set(r["variants"]) == {"bf16", "4bit", "bf16-gemv"}
        assert set(r["speedups"]) == {"bf16-gemv over bf16"}
        assert all(is_figure(v) for v in r["speedups"].values())


def test_decode_chain_refuses_unknown_variants(tmp_path):
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-m", "benchmarks.gpu.decode_chain", "--smoke",
                           "--variants", "bf16,4bit-pdl"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and "unknown ['4bit-pdl']" in proc.stderr
