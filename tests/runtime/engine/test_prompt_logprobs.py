"""prompt_logprobs equal transformers' log-softmax over the same prompt, whatever the
scheduling: chunked prefill, a prompt whose prefix sits in the prefix cache, preemption
(recompute), and n > 1 (reported once)."""
from __future__ import annotations

import pytest
import torch

from kubellm.runtime import LLM, SamplingParams

TOP = 3


@pytest.fixture(scope="module")
def prompt(tiny_model_dir):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    return tok.encode("The quick brown fox jumps over the lazy dog, and then the dog "
                      "sleeps in the sun while the fox runs into the forest.")


@pytest.fixture(scope="module")
def reference(tiny_model_dir, prompt):
    """transformers' logprob of each prompt token given those before it, and the top 3."""
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0, :-1].float()
    logprobs = logits.log_softmax(-1)
    chosen = logprobs.gather(1, torch.tensor(prompt[1:])[:, None])[:, 0]
    return chosen.tolist(), logprobs.topk(TOP, dim=-1).indices.tolist()


def check(entries, prompt, reference):
    chosen, top = reference
    assert len(entries) == len(prompt) and entries[0] is None
    for position, entry in enumerate(entries[1:]):
        token = prompt[position + 1]
        assert entry[token] == pytest.approx(chosen[position], abs=2e-4)
        assert set(top[position]) <= set(entry)    # the top 3, plus the prompt's token
        assert len(entry) <= TOP + 1


@pytest.mark.parametrize("fields", [
    dict(),
    dict(max_num_batched_tokens=8, block_size=8),          # chunked prefill
    dict(num_kv_blocks=6, block_size=8, max_num_seqs=4),   # preemption by recompute
], ids=["one-chunk", "chunked-prefill", "preemption"])
def test_prompt_logprobs_match_transformers(tiny_model_dir, prompt, reference, fields):
    llm = LLM(tiny_model_dir, max_model_len=256, **fields)
    params = SamplingParams(temperature=0, max_tokens=4, prompt_logprobs=TOP, n=2,
                            ignore_eos=True)
    crowd = SamplingParams(temperature=1.0, max_tokens=20, ignore_eos=True, seed=1)
    outs = llm.generate([prompt, prompt[:20], prompt[5:30]], [params, crowd, crowd])
    check(outs[0].prompt_logprobs, prompt, reference)
    assert outs[1].prompt_logprobs is None
    if "num_kv_blocks" in fields:
        assert llm.engine.scheduler.num_preemptions > 0


def test_cached_prefix_is_still_scored(tiny_model_dir, prompt, reference):
    llm = LLM(tiny_model_dir, max_model_len=256, block_size=8)
    llm.generate([prompt], SamplingParams(temperature=0, max_tokens=2))   # fills the cache
    again = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=2))[0]
    assert again.num_cached_tokens > 0
    scored = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=2,
                                                   prompt_logprobs=TOP))[0]
    check(scored.prompt_logprobs, prompt, reference)
    assert llm.engine.scheduler.num_special == 0   # finished: plain steps again
