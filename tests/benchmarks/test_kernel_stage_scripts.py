"""The decode-ablation and prefill-attention GPU stages, shrunk to tiny shapes on the CPU:
each runs end to end and writes well-formed figures (never judged by their size)."""
import json

from kubellm.runtime.kernel_switches import KernelSwitches

from tests.benchmarks.smoke import run_module
from tests.figures import is_figure


def run(module, *args, tmp_path):
    proc = run_module(module, "--smoke", "--out", tmp_path, *args, timeout=900)
    return proc.stdout


def test_decode_ablation_smoke_writes_figures(tmp_path):
    run("benchmarks.gpu.decode_ablation", "--layers", "1", "--batches", "1,2", "--context",
        "16", "--replays", "1", "--profile-steps", "1", tmp_path=tmp_path)
    result = json.loads((tmp_path / "decode_ablation.json").read_text())
    names = [v["variant"] for v in result["variants"]]
    assert names[0] == "defaults" and names[-1] == "defaults_again"
    assert "rope_kv_write" in names
    assert not [n for n in names if n.startswith("w4a16")]   # load-time 4-bit switches
    for row in result["variants"]:
        assert is_figure(row["batch1_ms"]) and is_figure(row["batch2_ms"])
        assert row["batch2_max_rel_diff"] < 1e-5      # fp32 on the CPU: the same states
    for batch in ("1", "2"):
        floors = result["floors"][batch]
        # the step floor adds the attention's to the GEMMs' (rounded: at the smoke shape
        # the attention's share can round to nothing)
        assert is_figure(floors["gemm_ms"]) and floors["gemm_ms"] <= floors["step_floor_ms"]
    assert result["profile_defaults"]["by_part_ms"] and result["profile_all"]["top_kernels"]
    assert {g["gemm"] for g in result["gemms"]} == {"qkv", "o", "gate_up", "down", "lm_head"}
    assert all(is_figure(g["ms"]) and is_figure(g["floor_ms"]) for g in result["gemms"])
    assert "defaults" in (tmp_path / "decode_ablation_profile.txt").read_text()
    # the winners file holds what the next stages read as --kernel-switches
    KernelSwitches.parse((tmp_path / "kernel_switches_decode.txt").read_text().strip())


def test_prefill_attention_bench_smoke_writes_figures(tmp_path):
    run("benchmarks.kernels.bench_prefill_attention", tmp_path=tmp_path)
    result = json.loads((tmp_path / "bench_prefill_attention.json").read_text())
    assert [r["length"] for r in result["rows"]] == [24, 40]
    for row in result["rows"]:
        for variant in ("paged", "prefill", "prefill_tma"):
            assert is_figure(row[f"{variant}_us"]) and is_figure(row[f"{variant}_tflops"])
            assert row[f"{variant}_max_abs_diff"] < 1e-4      # fp32 against SDPA
            assert is_figure(row[f"{variant}_vs_sdpa"])
        assert is_figure(row["sdpa_default_us"])
    switches = (tmp_path / "kernel_switches_prefill.txt").read_text().strip()
    assert KernelSwitches.parse(switches).enabled() == result["recommended_switches"]


def test_decode_long_tail_bench_smoke_writes_figures(tmp_path):
    run("benchmarks.kernels.bench_decode_long_tail", tmp_path=tmp_path)
    result = json.loads((tmp_path / "bench_decode_long_tail.json").read_text())
    assert [c["case"] for c in result["cases"]] == ["chat_step_0", "w_like", "uniform_4x24"]
    for case in result["cases"]:
        assert [(c["splits"], c["min_chunk"], c["decode_only"]) for c in case["configs"]] \
            == [(1, 0, False), (1, 0, True), (4, 8, True)]
        assert case["max_context"] > 8     # some sequence is cut by the long split
        for config in case["configs"]:
            assert is_figure(config["us"]) and is_figure(config["fraction_of_copy_bw"])
            assert config["max_abs_diff_vs_unsplit"] < 1e-5     # fp32: the same outputs


def test_decode_few_sequences_bench_smoke_writes_figures(tmp_path):
    run("benchmarks.kernels.bench_decode_long_tail", "--few", tmp_path=tmp_path)
    result = json.loads((tmp_path / "bench_decode_few.json").read_text())
    assert [c["case"] for c in result["cases"]] == ["few_1x24", "few_2x40"]
    for case in result["cases"]:
        assert [(c["splits"], c["min_chunk"], c["decode_only"]) for c in case["configs"]] \
            == [(1, 0, False), (1, 0, True), (8, 0, True), (8, 8, True), (8, 16, True)]
        for config in case["configs"]:
            assert is_figure(config["us"]) and is_figure(config["speedup_vs_unsplit"])
            assert config["max_abs_diff_vs_unsplit"] < 1e-5     # fp32: the same outputs


def test_decode_tiles_sweep_smoke_writes_figures(tmp_path):
    run("benchmarks.kernels.bench_decode_long_tail", "--tiles", tmp_path=tmp_path)
    result = json.loads((tmp_path / "decode_tiles.json").read_text())
    assert [r["case"] for r in result["rows"]] == ["chat_step_0", "w_like", "uniform_4x24",
                                                   "few_1x24"]
    long_keys = {"(32, 4, 2)|(1, 0)", "(32, 4, 2)|(4, 8)", "(64, 4, 2)|(1, 0)",
                 "(64, 4, 2)|(4, 8)"}
    for row in result["rows"]:
        expected = ({"(32, 4, 2)|None", "(64, 4, 2)|None"} if row["case"] == "few_1x24"
                    else long_keys)
        assert set(row["us"]) == expected and all(is_figure(us) for us in row["us"].values())
    assert set(result["long_batches"]) == long_keys
    assert set(result["few_sequences"]) == {"(32, 4, 2)|None", "(64, 4, 2)|None"}
    # against the best of each batch: the best key of all is within the worst's ratio
    assert min(result["long_batches"].values()) >= 1.0


def test_varlen_smoke_writes_figures(tmp_path):
    run("benchmarks.gpu.varlen", "--seeds", "0,1", "--with-switches", "decode_long_split",
        "--with-decode-config", "autotune", "--with-prefill-config", "64,8,3",
        "--with-prefill-step-tokens", "20", tmp_path=tmp_path)
    result = json.loads((tmp_path / "varlen_chat.json").read_text())
    runs = result["runs"]
    switched = "with_switches:decode_long_split"
    tiles = "with_tile_config:decode autotune prefill 64,8,3 prefill_step_tokens 20"
    assert [(r["engine"], r["seed"]) for r in runs] == [
        ("hardware_aware_defaults", 0), ("hardware_aware_defaults", 1),
        (switched, 0), (switched, 1), (tiles, 0), (tiles, 1), ("previous_fixed_defaults", 0)]
    assert [r["kernel_switches"] for r in runs].count("decode_long_split=on") == 0
    assert all("decode_long_split=on" in r["kernel_switches"] for r in runs
               if r["engine"] == switched)
    for r in runs:
        assert r["output_tokens"] == sum(varlen_outputs(r["seed"]))   # every token made
        # figures, never their size: a loaded CPU's fraction can round to 0.0
        assert is_figure(r["fraction_of_limit"]) and is_figure(r["fraction_of_strict_limit"])
        assert is_figure(r["limit"]["limit_s"])  # the smoke shape's limit can round to 0.0
        assert r["limit"]["strict_limit_s"] >= r["limit"]["limit_s"]
        steps = r["mixed_steps"] + r["decode_few_steps"] + r["decode_many_steps"]
        assert steps == r["steps"] > 0
        assert r["max_num_seqs"] > 0 and r["max_num_batched_tokens"] > 0
        assert r["late_compiles"] == 0   # the interpreter compiles nothing; CUDA counts
    assert is_figure(result["mean_fraction_of_limit"])


def varlen_outputs(seed):
    from benchmarks.gpu.varlen import lengths
    return lengths("chat", seed, smoke=True)[1]


def test_paged_attention_bench_smoke_writes_figures(tmp_path):
    run("benchmarks.kernels.bench_paged_attention", tmp_path=tmp_path)
    result = json.loads((tmp_path / "bench_paged_attention.json").read_text())
    assert [(r["batch"], r["context"]) for r in result["results"]] == [
        (2, 40), (2, 100), (3, 40), (3, 100)]
    assert [(r["batch"], r["length"]) for r in result["prefill_results"]] == [(2, 24)]
    assert all(is_figure(r["ours_us"]) for r in result["results"] + result["prefill_results"])


def test_prefill_tiles_smoke_writes_figures(tmp_path):
    run("benchmarks.kernels.bench_paged_attention", "--prefill-tiles", tmp_path=tmp_path)
    result = json.loads((tmp_path / "prefill_tiles.json").read_text())
    assert [(r["batch"], r["length"]) for r in result["rows"]] == [(2, 24)]
    assert set(result["rows"][0]["us"]) == {"(32, 4, 2)", "(64, 4, 2)"}
    assert all(is_figure(us) for us in result["rows"][0]["us"].values())
    assert min(result["mean_time_over_best"].values()) == 1.0   # the best is its own best
    assert result["warmup_choice"] == {}   # the interpreter has no autotuner


def test_dense_gemm_bench_smoke_writes_figures(tmp_path):
    run("benchmarks.kernels.bench_dense_gemm", tmp_path=tmp_path)
    result = json.loads((tmp_path / "dense_gemm.json").read_text())
    assert [(r["gemm"], r["m"]) for r in result["rows"]] == [
        ("qkv", 3), ("qkv", 20), ("down", 3), ("down", 20)]
    for row in result["rows"]:
        assert set(row["us"]) == {"cublas", "triton_16_16_32_1_4_2", "triton_16_16_32_2_4_2"}
        assert all(is_figure(us) for us in row["us"].values())
        # each kernel checked against F.linear before it was timed (fp32 on the CPU)
        assert max(row["max_abs_diff"].values()) < 1e-4
        assert row["best_triton"] in row["us"] and is_figure(row["best_triton_over_cublas"])


def test_dense_gemv_bench_smoke_writes_figures(tmp_path):
    run("benchmarks.kernels.bench_dense_gemv", tmp_path=tmp_path)
    result = json.loads((tmp_path / "dense_gemv.json").read_text())
    assert [(r["gemm"], r["m"]) for r in result["rows"]] == [
        ("qkv", 1), ("qkv", 3), ("down", 1), ("down", 3)]
    for row in result["rows"]:
        assert set(row["us"]) == {"cublas", "triton_8_32_4_1", "triton_4_64_4_1"}
        assert all(is_figure(us) for us in row["us"].values())
        assert all(is_figure(f) for f in row["of_copy_bandwidth"].values())
        # each kernel checked against F.linear before it was timed (fp32 on the CPU)
        assert max(row["max_abs_diff"].values()) < 1e-4
        assert row["best_triton"] in row["us"] and is_figure(row["best_triton_over_cublas"])
    assert result["one_config"] in ("triton_8_32_4_1", "triton_4_64_4_1")
