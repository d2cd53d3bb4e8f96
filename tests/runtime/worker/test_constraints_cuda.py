"""On CUDA (STAGES=api of benchmarks/gpu/run_all.sh): the grammar mask, applied by
xgrammar's Triton kernel from a pinned host bitmask, masks exactly what the CPU path
masks; an engine on the GPU keeps structured outputs valid and prompt logprobs equal to
the CPU engine's."""
from __future__ import annotations

import json

import pytest
import torch

from kubellm.runtime import LLM, SamplingParams
from kubellm.runtime.core.structured_outputs import StructuredOutputsParams
from kubellm.runtime.worker.grammar import GrammarCompiler
from kubellm.runtime.worker.logits_constraints import ConstraintApplier, LogitsConstraints

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
xgrammar = pytest.importorskip("xgrammar", reason="xgrammar is not installed here")

FIELDS = dict(max_model_len=512, num_kv_blocks=64, dtype="float32")


def test_cuda_mask_equals_cpu_mask(tokenizer_dir):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    vocab = len(tok) + 64                 # a padded model vocabulary, as real models have
    compiler = GrammarCompiler(tok, vocab, [tok.eos_token_id])
    compiled = compiler.compile(StructuredOutputsParams(json_object=True))
    params = SamplingParams(structured_outputs=StructuredOutputsParams(json_object=True),
                            logit_bias={5: 3.0})
    prefix = tok.encode('{"a": [1, 2', add_special_tokens=False)
    torch.manual_seed(0)
    logits = torch.randn(4, vocab)
    masked = {}
    for device in ("cpu", "cuda"):
        constraints = [LogitsConstraints.create(params, vocab, device,
                                                compiler.matcher(compiled)) for _ in range(3)]
        outputs = [[], prefix, prefix[:2]]
        work = logits.to(device).clone()
        ConstraintApplier().apply(work, constraints + [None], outputs + [[]])
        masked[device] = work.cpu()
    assert torch.equal(masked["cpu"], masked["cuda"])
    assert torch.isinf(masked["cpu"][:3]).any() and not torch.isinf(masked["cpu"][3]).any()


def test_engine_on_cuda(tiny_model_dir):
    gpu = LLM(tiny_model_dir, device="cuda", **FIELDS)
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0,
                                                     "maximum": 99}},
              "required": ["n"], "additionalProperties": False}
    params = SamplingParams(temperature=1.0, seed=2, max_tokens=80, n=4,
                            structured_outputs=StructuredOutputsParams(json=schema))
    for out in gpu.generate(["A number:"], params)[0].outputs:
        if out.finish_reason == "stop":
            assert 0 <= json.loads(out.text)["n"] <= 99
    scored = SamplingParams(temperature=0, max_tokens=2, prompt_logprobs=2)
    prompt = "The quick brown fox jumps over the lazy dog"
    on_gpu = gpu.generate([prompt], scored)[0].prompt_logprobs
    on_cpu = LLM(tiny_model_dir, device="cpu", **FIELDS).generate([prompt], scored)[0]
    for a, b in zip(on_gpu[1:], on_cpu.prompt_logprobs[1:]):
        token = next(iter(b))   # the prompt token's entry comes first
        assert a[token] == pytest.approx(b[token], abs=1e-3)
