"""The trained-float-model benchmark, shrunk: train_float_model.py trains a few steps on a
few files and writes a bf16 checkpoint with its tokenizer that transformers loads; the
quality script's --float-model mode then scores it. Our float path must give the
perplexity transformers gives on the same checkpoint and windows (the loader, the tied
head and the tokenizer agree); the quantized variants must be figures. Their size says
nothing after a few steps of training."""
import json
import math

import pytest

from tests.benchmarks.smoke import run_module
from tests.figures import is_figure


@pytest.fixture(scope="module")
def float_model(tmp_path_factory):
    out = tmp_path_factory.mktemp("float-llama")
    proc = run_module("benchmarks.cpu.train_float_model", "--out", out, "--steps", 3,
                      "--batch", 2, "--seq", 64, "--files", 60)
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["steps"] == 3 and summary["files"] == 60
    assert math.isfinite(summary["held_out_perplexity_fp32"])
    return out


def test_checkpoint_is_bf16_with_its_tokenizer(float_model):
    from safetensors import safe_open
    from transformers import AutoTokenizer
    with safe_open(str(float_model / "model.safetensors"), "pt") as f:
        dtypes = {f.get_tensor(k).dtype for k in f.keys()}
    assert {str(d) for d in dtypes} == {"torch.bfloat16"}
    tokenizer = AutoTokenizer.from_pretrained(float_model)
    assert len(tokenizer) == 4096
    assert tokenizer.decode(tokenizer("def f(x):\n    return x").input_ids) == \
        "def f(x):\n    return x"


def test_float_mode_matches_transformers_and_prints_figures(float_model, tmp_path):
    run_module("benchmarks.cpu.quantization_quality", "--float-model", float_model,
               "--limit", 300, "--out", tmp_path)
    result = json.loads((tmp_path / "quantization_quality_float.json").read_text())
    for text in ("prose", "held_out_code"):
        row = result[text]
        assert row["tokens"] == 300
        assert row["ppl_bf16"] == pytest.approx(row["ppl_transformers_fp32"], rel=1e-4)
        # the loader's online 4-bit is the variant measured as the default
        assert row["ppl_4bit_loader"] == pytest.approx(
            row["ppl_4bit_asymmetric_group128"], rel=1e-5)
        for key in ("4bit_asymmetric_group128", "4bit_asymmetric_group128_no_refit",
                    "4bit_symmetric_group128", "4bit_asymmetric_group64",
                    "4bit_asymmetric_group32", "fp8_weights", "fp8_weights_and_activations",
                    "fp8_kv_cache"):
            assert is_figure(row[f"ppl_{key}"]), (text, key, row)
            assert row[f"increase_{key}"] == pytest.approx(
                row[f"ppl_{key}"] / row["ppl_bf16"] - 1, abs=1e-4)
