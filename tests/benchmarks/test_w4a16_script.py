"""The 4-bit GPU benchmark, shrunk to a tiny shape on the CPU: it must run and write
well-formed figures (their size says nothing on a CPU)."""
import json

import pytest

from kubellm.kernels.w4a16_gemm import GEMV_MAX_M, GEMV_TC_MAX_M

from tests.benchmarks.smoke import run_module
from tests.figures import is_figure


def test_w4a16_smoke_writes_figures(tmp_path):
    run_module("benchmarks.gpu.w4a16", "--smoke", "--out", tmp_path, timeout=900)
    result = json.loads((tmp_path / "w4a16.json").read_text())
    summary = result["summary"]
    engines = {"4bit", "4bit-tinygemm"}   # every 4-bit engine by default
    assert set(summary["decode_speedup_vs_bf16"]) == engines
    assert all(set(rates) == {"1", "4"} and all(is_figure(v) for v in rates.values())
               for rates in summary["decode_speedup_vs_bf16"].values())
    assert set(summary["workload_w_ratio_vs_bf16"]) == engines
    assert all(is_figure(v) for v in summary["workload_w_ratio_vs_bf16"].values())
    assert result["4bit"]["quantization"] == "4bit" and "quantization" not in result["bf16"]
    assert "kernel_switches" not in result["4bit"]
    assert result["4bit-tinygemm"]["kernel_switches"] == "w4a16_tinygemm"
    # the 4-bit engine holds its linears in under a quarter of fp32's bytes (groups of 64)
    assert result["4bit"]["linear_weight_bytes"] < result["bf16"]["linear_weight_bytes"] / 4
    assert min(result["4bit"]["num_kv_blocks"], result["bf16"]["num_kv_blocks"]) > 0
    assert is_figure(result["4bit"]["workload_w"]["output_tok_s"])
    gemm = result["kernel"]["gemm"]
    assert {(r["k"], r["n"], r["m"]) for r in gemm} == {(64, 128, 1), (64, 128, 4),
                                                        (128, 64, 1), (128, 64, 4)}
    # every variant that takes the rows is timed: the GEMVs only up to their row limits
    # (gemm-tc and dequant take any)
    assert all(set(r["variants"]) == {"dot", "dot-rows", "dot-zeros", "gemm-tc", "dequant"}
               | ({"gemv"} if r["m"] <= GEMV_MAX_M else set())
               | ({"gemv-tc"} if r["m"] <= GEMV_TC_MAX_M else set()) for r in gemm)
    assert all(is_figure(v["weight_read_tb_s"]) and is_figure(v["of_copy_bandwidth"])
               for r in gemm for v in r["variants"].values())
    assert all(r["best"] in r["variants"] and r["default"] in r["variants"] for r in gemm)
    # the probes: 8-bit codes on the same shape, and the zeros + cast around a decode call
    assert all(is_figure(r["probe"][key]) for r in gemm
               for key in ("8bit_us", "8bit_weight_read_tb_s", "zeros_and_cast_us"))
    # the peer (PyTorch's int4 GEMM) on the shape it takes, with the same product as ours
    peer = [r for r in gemm if "tinygemm" in r]
    assert {(r["k"], r["n"]) for r in peer} == {(128, 64)}
    assert all(is_figure(r["tinygemm"]["us"]) and r["tinygemm"]["max_abs_diff"] < 0.05
               for r in peer)


def refusal(capsys, *flags) -> str:
    """The benchmark's own check of its flags, in this process (no run starts)."""
    from benchmarks.gpu.w4a16 import main
    with pytest.raises(SystemExit) as exited:
        main(["--smoke", *flags])
    assert exited.value.code == 2
    return capsys.readouterr().err


def test_w4a16_refuses_an_unknown_engine(tmp_path, capsys):
    assert "--engines: unknown ['fp3']" in refusal(capsys, "--out", str(tmp_path),
                                                   "--engines", "4bit,fp3")


def test_w4a16_whole_run_refuses_variants_without_the_default(tmp_path, capsys):
    err = refusal(capsys, "--out", str(tmp_path), "--variants", "dot-zeros")
    assert "--variants: the whole run needs dot, gemm-tc, gemv, gemv-tc among them" in err
    assert "--variants: unknown ['dot-fast']" in refusal(capsys, "--out", str(tmp_path),
                                                         "--variants", "dot,dot-fast")


def test_every_compared_engine_is_a_valid_engine_config():
    """The FP8 engines (--engines fp8,kv-fp8,fp8-kv-fp8) run only on request: their
    settings must at least be ones the engine accepts, and differ from bf16's."""
    from benchmarks.gpu.w4a16 import DEFAULT_ENGINES, ENGINES
    from kubellm.runtime.config import EngineConfig
    assert set(DEFAULT_ENGINES.split(",")) <= set(ENGINES)
    for name, settings in ENGINES.items():
        EngineConfig(**settings)
        assert bool(settings) == (name != "bf16"), name
    assert ENGINES["fp8-kv-fp8"] == {**ENGINES["fp8"], **ENGINES["kv-fp8"]}
