"""The structured-output mask and logprob-overhead benchmarks in their --smoke mode on the
CPU: the scripts STAGES=api of benchmarks/gpu/run_all.sh runs on the GPU must not fail
there for a Python error, and must write well-formed figures."""
import json

from tests.benchmarks.smoke import run_module
from tests.figures import is_figure


def run(module: str, *args: str) -> None:
    run_module(module, "--smoke", *args)


def test_mask_bench_smoke(tmp_path, tokenizer_dir):
    run("benchmarks.api.mask_bench", "--out", str(tmp_path), "--tokenizer", tokenizer_dir)
    result = json.loads((tmp_path / "mask_bench_cpu.json").read_text())
    kinds = {row["kind"]: row for row in result["kinds"]}
    assert set(kinds) == {"json_schema", "json_object", "regex", "choice", "grammar"}
    for row in kinds.values():
        for key in ("compile_ms", "fill_us_per_seq", "apply_ms", "sampler_ms_plain",
                    "sampler_ms_constrained"):
            assert isinstance(row[key], float) and row[key] >= 0, (row["kind"], key)
    assert "| json_schema |" in (tmp_path / "mask_bench_cpu.md").read_text()


def test_logprob_overhead_smoke(tmp_path):
    run("benchmarks.api.logprob_overhead", "--out", str(tmp_path))
    result = json.loads((tmp_path / "logprob_overhead_cpu.json").read_text())
    assert set(result["decode"]["by_logprobs"]) == {"None", "0", "5", "20"}
    assert all(is_figure(row["step_ms"]) for row in result["decode"]["by_logprobs"].values())
    assert set(result["prefill"]["seconds_by_prompt_logprobs"]) == {"None", "1", "5"}
    assert all(is_figure(row["ms"]) for row in result["sampler"]["by_logprobs"].values())
    assert "prompt_logprobs" in (tmp_path / "logprob_overhead_cpu.md").read_text()


def test_grammar_engines_smoke(tmp_path, tokenizer_dir):
    run("benchmarks.api.grammar_engines", "--out", str(tmp_path), "--tokenizer",
        tokenizer_dir)
    result = json.loads((tmp_path / "grammar_engines.json").read_text())
    engines = {row["engine"] for row in result["rows"]}
    assert engines == {"xgrammar", "llguidance"}, result["skipped"]
    for row in result["rows"]:
        assert row["fill_us_per_seq"] >= 0 and row["accept_us_per_seq"] >= 0
    assert "| llguidance | json_schema |" in (tmp_path / "grammar_engines.md").read_text()
