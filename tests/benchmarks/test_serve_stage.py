"""The GPU run's serving stage (STAGES=serve: benchmarks/serving/run_h200.sh), shrunk to
a tiny model on the CPU: the script, the launched server with two API server processes,
the in-process comparison, the targets and the profiles all run and write well-formed
figures (never checked for size: this machine's speed says nothing)."""
import json
import os
import subprocess

from tests.figures import is_figure
from tests.paths import ROOT


def test_serve_stage_smoke_writes_figures_targets_and_profiles(tmp_path, tiny_model_dir,
                                                               tokenizer_dir):
    out, profiles = tmp_path / "out", tmp_path / "out" / "serve_profiles"
    proc = subprocess.run(
        ["bash", "benchmarks/serving/run_h200.sh", str(out), tokenizer_dir, "-", "--",
         "--workloads", "6@50,6@inf", "--device", "cpu", "--input-len", "16",
         "--output-len", "4", "--max-model-len", "256", "--num-kv-blocks", "128",
         "--api-server-count", "2", "--profile-dir", str(profiles)],
        capture_output=True, text=True, timeout=900, cwd=ROOT,
        env={**os.environ, "MODEL_DIR": tiny_model_dir})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((out / "serve_bench.json").read_text())
    assert result["server"] == {"api_server_count": 2} and result["server_exit_code"] == 0
    for backend in ("http", "in_process"):
        assert [(r["num_requests"], r["request_rate"]) for r in result[backend]] == \
            [(6, 50.0), (6, "inf")]
        for row in result[backend]:
            assert row["num_failed"] == 0 and row["output_tokens"] == 6 * 4
            assert is_figure(row["output_tok_s"]) and is_figure(row["ttft_ms"]["p50"])
    assert len(result["http_overhead"]) == 2
    assert result["targets"] == []  # none of issue 14's loads ran at this size
    names = {p.name for p in profiles.iterdir()}
    assert {"engine_core.profile.txt", "api_server_0.profile.txt",
            "api_server_1.profile.txt", "in_process.profile.txt"} <= names
    core_profile = (profiles / "engine_core.profile.txt").read_text()
    assert "stack samples" in core_profile and "step_s=" in core_profile
