"""The embedded default model through our own engine and the CLI, offline."""
import os
import subprocess
import sys

from kubellm.runtime import LLM, SamplingParams


def test_llm_without_model_answers_paris(default_model_dir):
    llm = LLM(max_model_len=256)
    out = llm.generate("The capital of France is",
                       SamplingParams(temperature=0, max_tokens=4))[0]
    assert out.outputs[0].text.strip().startswith("Paris"), out.outputs[0].text
    assert out.outputs[0].finish_reason == "length"


def test_cli_generate_answers_paris(default_model_dir):
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-m", "kubellm.runtime", "generate",
                           "The capital of France is", "--max-tokens", "4",
                           "--max-model-len", "256"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("The capital of France is Paris"), proc.stdout
