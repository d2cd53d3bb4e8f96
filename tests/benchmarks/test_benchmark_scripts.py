"""The GPU benchmark script, shrunk to a tiny shape on the CPU: a Python error in it
would otherwise surface only on the GPU machine, after its device time is spent."""
import json

import pytest

from tests.benchmarks.smoke import run_module
from tests.figures import is_figure


def test_workload_w_smoke_writes_figures(tmp_path):
    run_module("benchmarks.gpu.workload_w", "--smoke", "--compare-hf", "--out", tmp_path)
    result = json.loads((tmp_path / "workload_w.json").read_text())
    assert result["kubellm"]["output_tokens"] == 8 * 6
    assert is_figure(result["hf"]["hf_generate_output_tok_s"])
    assert is_figure(result["fraction_of_limit"])
    assert {r["batch"] for r in result["sweep"]} >= {1, 4}
    for key in ("decode_batch256", "decode_batch256_final_only"):
        assert is_figure(result[key]["host_fraction"]) and result[key]["host_fraction"] <= 1
    assert (tmp_path / "throughput_vs_batch_context.png").stat().st_size > 1000


@pytest.mark.parametrize("core_encoding", [False, True])
def test_host_profile_smoke_writes_both_modes(tmp_path, core_encoding):
    run_module("benchmarks.gpu.host_profile", "--smoke", "--layers", 1, "--batch", 4,
               "--context", 16, "--steps", 4, "--out", tmp_path,
               *(["--core-encoding"] if core_encoding else []))
    results = json.loads((tmp_path / "host_profile_llama3-8b_1l.json").read_text())
    assert [r["async_scheduling"] for r in results] == [False, True]
    for r in results:
        assert is_figure(r["step_ms"]) and is_figure(r["host_ms"])
        assert ("core_ms" in r) == core_encoding
        if core_encoding:
            assert is_figure(r["core_encode_ms"])
            assert r["core_ms"] == pytest.approx(r["host_ms"] + r["core_encode_ms"], abs=2e-3)
    # a profile report; which functions make its top lines depends on the machine's load
    report = (tmp_path / "host_profile_async_True.txt").read_text()
    assert "function calls" in report and "Ordered by" in report


def test_workload_w_switch_ab_runs_both_states_twice(tmp_path):
    run_module("benchmarks.gpu.workload_w", "--smoke", "--skip-sweep", "--switch-ab",
               "rope_kv_write", "--out", tmp_path)
    ab = json.loads((tmp_path / "workload_w.json").read_text())["switch_ab"]
    assert ab["switches"] == ["rope_kv_write"]
    assert [len(ab["output_tok_s"][s]) for s in ("off", "on")] == [2, 2]
    assert all(is_figure(v) for rates in ab["output_tok_s"].values() for v in rates)
    assert is_figure(ab["on_over_off"])
    decode = json.loads((tmp_path / "workload_w.json").read_text())["decode_batch256_final_only"]
    assert is_figure(decode["host_ms"]) and is_figure(decode["decode_tok_s"])


def test_mixed_step_smoke_times_arrivals_and_profiles_both_steps(tmp_path):
    run_module("benchmarks.gpu.mixed_step", "--smoke", "--layers", 1, "--decodes", 3,
               "--context", 16, "--prompt", 24, "--prompts", 2, "--repeats", 2,
               "--top", 5, "--max-model-len", 4096, "--out", tmp_path)
    result = json.loads((tmp_path / "mixed_step.json").read_text())
    assert result["shape"] == "smoke" and result["layers"] == 1
    assert [r["arrival"] for r in result["rows"]] == [0, 1]
    # each arrival adds both prompts beside the 3 decodes (and the first arrival's 2)
    assert [r["requests"] for r in result["rows"]] == [5, 7]
    for row in result["rows"]:
        assert len(row["step_wall_ms"]) == 4 and all(map(is_figure, row["step_wall_ms"]))
        assert row["step_device_ms"] == []   # CUDA events only on a GPU
    for name in ("decode", "mixed"):
        assert "Self CPU" in (tmp_path / f"mixed_step_profile_{name}.txt").read_text()


def test_w_switches_smoke_runs_both_engines(tmp_path):
    run_module("benchmarks.gpu.w_switches", "--smoke", "--with", "decode_long_split",
               "--with-decode-config", "32,4,2", "--repeats", "1", "--out", tmp_path)
    result = json.loads((tmp_path / "w_switches.json").read_text())
    assert "decode_long_split=off" in result["defaults"]["kernel_switches"]
    assert result["defaults"]["tile_config"] == "default"
    assert result["with_switches"]["tile_config"] == "decode 32,4,2"
    assert "decode_long_split=on" in result["with_switches"]["kernel_switches"]
    for engine in ("defaults", "with_switches"):
        assert len(result[engine]["output_tok_s"]) == 1 and is_figure(result[engine]["best"])
        assert is_figure(result[engine]["fraction_of_strict_limit"])
    assert is_figure(result["on_over_off"])


def test_tile_config_options_set_the_kernel_defaults_inside_their_block():
    from benchmarks.common import tile_config
    from kubellm.kernels import paged_attention
    from kubellm.runtime.attention import triton_backend
    before = paged_attention.DECODE_CONFIG, paged_attention.PREFILL_CONFIG
    step_before = triton_backend.PREFILL_KERNEL_MIN_STEP_TOKENS
    with tile_config.active(decode="autotune"):
        assert paged_attention.DECODE_CONFIG is None
        assert paged_attention.PREFILL_CONFIG == before[1]
    with tile_config.active(decode="32,4,2", prefill="autotune"):
        assert paged_attention.DECODE_CONFIG == (32, 4, 2)
        assert paged_attention.PREFILL_CONFIG is None
    with tile_config.active(prefill="64,8,3", prefill_step="100000"):
        assert paged_attention.DECODE_CONFIG == before[0]
        assert paged_attention.PREFILL_CONFIG == (64, 8, 3)
        assert triton_backend.PREFILL_KERNEL_MIN_STEP_TOKENS == 100000
    with tile_config.active():
        assert (paged_attention.DECODE_CONFIG, paged_attention.PREFILL_CONFIG) == before
    with pytest.raises(RuntimeError), tile_config.active(prefill="autotune"):
        raise RuntimeError("a failed run inside the block")
    assert (paged_attention.DECODE_CONFIG, paged_attention.PREFILL_CONFIG) == before
    assert triton_backend.PREFILL_KERNEL_MIN_STEP_TOKENS == step_before
    assert tile_config.describe(decode="32,4,2", prefill="autotune") == \
        "decode 32,4,2 prefill autotune"
    assert tile_config.describe(prefill_step="4096") == "prefill_step_tokens 4096"
    assert tile_config.describe() == "default"
    with pytest.raises(SystemExit, match="want \"autotune\" or BLOCK_N,WARPS,STAGES"):
        tile_config.parse("64,4")
    with pytest.raises(SystemExit, match="--with-prefill-config '64,x,2'"):
        tile_config.check(decode="64,4,2", prefill="64,x,2")
    with pytest.raises(SystemExit, match="--with-prefill-step-tokens '0': want a positive"):
        tile_config.check(prefill_step="0")
