"""lm-evaluation-harness (PyPI ``lm-eval``) against ``kubellm serve`` end to end, with
``--batch_size 4``: a multiple-choice task (loglikelihood requests: echo, logprobs 1, a
list of token-id prompts) and a generate_until task, both on small local task files.

Scores of a tiny random model mean nothing, so the test checks what lm-eval computed
from our answers against independent references: every loglikelihood equals the one
transformers computes on the same weights, and every generation equals offline greedy
generation with the same stop strings."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import httpx
import pytest
import torch

from tests.runtime.server.conftest import free_port

pytestmark = pytest.mark.slow

MC_DOCS = [
    {"question": "What is the capital of France?", "choices": ["Paris", "London", "Rome"],
     "answer": 0},
    {"question": "How many legs does a spider have?", "choices": ["six", "eight", "ten"],
     "answer": 1},
    {"question": "Which planet is red?", "choices": ["Venus", "Jupiter", "Mars"], "answer": 2},
]
GEN_DOCS = [{"question": "What is 3 + 4?", "answer": "7"},
            {"question": "What colour is the sky?", "answer": "Blue"},
            {"question": "What is the opposite of hot?", "answer": "Cold"}]
MC_TASK = """task: kubellm_mc
dataset_path: json
dataset_kwargs: {{data_files: {{test: {path}}}}}
test_split: test
output_type: multiple_choice
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: answer
metric_list: [{{metric: acc}}]
"""
GEN_TASK = """task: kubellm_gen
dataset_path: json
dataset_kwargs: {{data_files: {{test: {path}}}}}
test_split: test
output_type: generate_until
doc_to_text: "Q: {{{{question}}}}\\nA:"
doc_to_target: answer
generation_kwargs: {{until: ["\\n", "Q:"], max_gen_toks: 12, do_sample: false}}
metric_list: [{{metric: exact_match}}]
"""


def write_tasks(folder) -> None:
    for name, docs, template in (("mc", MC_DOCS, MC_TASK), ("gen", GEN_DOCS, GEN_TASK)):
        data = folder / f"{name}.jsonl"
        data.write_text("".join(json.dumps(d) + "\n" for d in docs))
        (folder / f"kubellm_{name}.yaml").write_text(template.format(path=data))


@pytest.fixture(scope="module")
def serve(tiny_model_dir, tmp_path_factory):
    """``kubellm serve --model DIR`` in its own process, as a user starts it."""
    port = free_port()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kubellm.runtime", "serve", "--model", tiny_model_dir,
             "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port),
             "--device", "cpu", "--dtype", "float32", "--max-model-len", "512",
             "--num-kv-blocks", "128", "--uvicorn-log-level", "warning"],
            stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(url + "/ready", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"kubellm serve did not start:\n{log.read_text()}")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.mark.parametrize("tokenizer_args", ["tokenizer_backend=huggingface,tokenizer={dir}",
                                            "tokenizer_backend=remote"],
                         ids=["local-tokenizer", "server-tokenizer"])
def test_lm_eval_end_to_end(serve, tiny_model_dir, tmp_path, monkeypatch, tokenizer_args):
    for key in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(key, "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    import lm_eval
    from lm_eval.tasks import TaskManager
    write_tasks(tmp_path)
    results = lm_eval.simple_evaluate(
        model="local-completions",
        model_args=f"model=tiny,base_url={serve}/v1/completions,num_concurrent=1,"
                   f"max_retries=1,tokenized_requests=True,"
                   + tokenizer_args.format(dir=tiny_model_dir),
        tasks=["kubellm_mc", "kubellm_gen"], task_manager=TaskManager(
            include_path=str(tmp_path)), batch_size=4, log_samples=True)
    assert 0 <= results["results"]["kubellm_mc"]["acc,none"] <= 1
    check_loglikelihoods(tiny_model_dir, results["samples"]["kubellm_mc"])
    check_generations(tiny_model_dir, results["samples"]["kubellm_gen"])


def check_loglikelihoods(model_dir: str, samples: list[dict]) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    assert len(samples) == len(MC_DOCS)
    for sample in samples:
        for (context, continuation), response in zip(sample["arguments"], sample["resps"]):
            # lm-eval's split: trailing spaces of the context go with the continuation
            spaces = len(context) - len(context.rstrip(" "))
            context, continuation = context[:len(context) - spaces], \
                context[len(context) - spaces:] + continuation
            ctx = tok.encode(context, add_special_tokens=False)
            whole = tok.encode(context + continuation, add_special_tokens=False)
            with torch.no_grad():
                logprobs = model(torch.tensor([whole])).logits[0].log_softmax(-1)
            want = sum(logprobs[i - 1, whole[i]].item() for i in range(len(ctx), len(whole)))
            assert response[0][0] == pytest.approx(want, abs=1e-3)


def check_generations(model_dir: str, samples: list[dict]) -> None:
    from kubellm.runtime import LLM, SamplingParams
    llm = LLM(model_dir, device="cpu", dtype="float32", max_model_len=512, num_kv_blocks=64)
    tok = llm.get_tokenizer()
    assert len(samples) == len(GEN_DOCS)
    for sample in samples:
        context, kwargs = sample["arguments"][0]
        stops = list(kwargs["until"]) + [tok.eos_token]
        want = llm.generate([tok.encode(context, add_special_tokens=False)], SamplingParams(
            temperature=0, max_tokens=kwargs["max_gen_toks"], stop=stops))[0].outputs[0].text
        assert sample["resps"][0][0] == want
