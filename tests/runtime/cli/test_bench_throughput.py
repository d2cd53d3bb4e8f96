"""`kubellm bench throughput`: the last line is one JSON object with the figures."""
import json
import subprocess
import sys

from tests.figures import is_figure


def test_json_last_line_with_hf_comparison(tiny_model_dir):
    proc = subprocess.run(
        [sys.executable, "-m", "kubellm.runtime", "bench", "throughput", "--model", tiny_model_dir,
         "--num-prompts", "6", "--input-len", "8", "--input-len-max", "40",
         "--output-len", "5", "--compare-hf", "--hf-batch-size", "4", "--json"],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["num_prompts"] == 6
    assert result["output_tokens"] == 6 * 5           # EOS ignored: exactly output-len each
    assert 6 * 8 <= result["input_tokens"] <= 6 * 40
    for key in ("output_tok_s", "total_tok_s", "hf_output_tok_s", "hf_total_tok_s"):
        assert is_figure(result[key]), key
    assert result["total_tok_s"] >= result["output_tok_s"]  # the same wall time, more tokens
    if result["hf_output_tok_s"]:  # a rate rounded to 0 on a loaded machine has no ratio
        assert result["speedup_vs_hf"] == round(result["output_tok_s"]
                                                / result["hf_output_tok_s"], 2)
