"""Greedy token ids equal to transformers generate() on the same fp32 weights, for each
Llama-family variant and each mixture-of-experts family, in every scheduling mode
(prefix caching on/off with shared prefixes, chunked prefill, preemption, each policy)."""
from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest
import torch

from kubellm.runtime import LLM, SamplingParams

FAMILIES = ["llama", "llama3", "mistral", "qwen2", "qwen3",
            "mixtral", "qwen2-moe", "qwen3-moe", "dots1"]
MAX_TOKENS = 10

MODES = {
    "prefix-cache": dict(enable_prefix_caching=True),
    "no-prefix-cache": dict(enable_prefix_caching=False),
    "chunked-prefill": dict(max_num_batched_tokens=24, block_size=8),
    "preemption": dict(num_kv_blocks=10, block_size=16),
    "priority": dict(scheduling_policy="priority", num_kv_blocks=12, max_num_seqs=5),
    "timeslice": dict(scheduling_policy="timeslice", timeslice_steps=3, max_num_seqs=4),
}


def make_prompts() -> list[list[int]]:
    """16 prompts of 3..100 tokens; half share a 40-token prefix (prefix-cache hits)."""
    rng = random.Random(1234)
    shared = [rng.randrange(100, 49000) for _ in range(40)]
    prompts = []
    for i in range(16):
        tail = [rng.randrange(100, 49000) for _ in range(rng.randint(3, 60))]
        prompts.append(shared + tail if i % 2 else tail)
    return prompts


@pytest.fixture(scope="module")
def references(tiny_model_factory):
    """transformers' greedy continuations, computed once per family."""
    from transformers import AutoModelForCausalLM
    refs = {}
    prompts = make_prompts()
    for family in FAMILIES:
        path = tiny_model_factory(family)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        outs = []
        for p in prompts:
            ids = model.generate(torch.tensor([p]), do_sample=False, max_new_tokens=MAX_TOKENS,
                                 min_new_tokens=MAX_TOKENS, pad_token_id=0)
            outs.append(ids[0, len(p):].tolist())
        refs[family] = (path, outs)
    return prompts, refs


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_matches_transformers(references, family, mode):
    prompts, refs = references
    path, expected = refs[family]
    llm = LLM(path, dtype="float32", **MODES[mode])
    params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
    priorities = [i % 3 for i in range(len(prompts))] if mode == "priority" else None
    outs = llm.generate(prompts, params, priority=priorities)
    got = [o.outputs[0].token_ids for o in outs]
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g == e, f"prompt {i} ({len(prompts[i])} tokens): {g} != {e}"
    engine = llm.engine
    # every block back in the pool, no reference left behind
    assert engine.kv.num_free_blocks == engine.kv.num_blocks
    assert all(engine.kv.ref_count(b) == 0 for b in range(engine.kv.num_blocks))
    assert not engine.has_unfinished_requests()
    if mode == "preemption":
        assert engine.scheduler.num_preemptions > 0, "the pool was meant to force preemption"
    if mode == "prefix-cache":
        assert engine.kv.prefix_hits >= 7 * 32, "the shared 40-token prefix should hit"
    if mode == "timeslice":
        assert engine.scheduler.num_timeslice_yields > 0, "long runs were meant to yield"
    if mode == "no-prefix-cache":
        assert engine.kv.prefix_hits == 0


def test_sharded_checkpoint_loads_the_same_weights(references, tmp_path):
    """A checkpoint split into shards with model.safetensors.index.json."""
    from transformers import AutoModelForCausalLM
    prompts, refs = references
    path, expected = refs["llama"]
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model.save_pretrained(tmp_path, max_shard_size="4MB")
    assert (tmp_path / "model.safetensors.index.json").exists()
    assert len(list(tmp_path.glob("model-*.safetensors"))) > 1
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(Path(path) / name, tmp_path / name)
    llm = LLM(str(tmp_path), dtype="float32")
    outs = llm.generate(prompts[:4], SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS,
                                                    ignore_eos=True))
    assert [o.outputs[0].token_ids for o in outs] == expected[:4]


@pytest.mark.parametrize("family", ["qwen3-moe", "dots1"])
def test_moe_engine_through_the_triton_kernel(references, family):
    """The fused MoE kernels (Triton's interpreter on CPU) in the engine: what CUDA runs,
    with the sorting, padding and config choice of real steps (prefill + decode)."""
    from kubellm.runtime.layers.moe import FusedExperts
    from kubellm.runtime.layers.moe_router import TopKRouter
    prompts, refs = references
    path, expected = refs[family]
    llm = LLM(path, dtype="float32")
    modules = [m for m in llm.engine.executor.model.modules()
               if isinstance(m, (FusedExperts, TopKRouter))]
    assert modules
    for module in modules:   # qwen3-moe's softmax router fuses too; dots1's stays torch
        module.use_triton = True
    n = 4
    outs = llm.generate(prompts[:3], SamplingParams(temperature=0.0, max_tokens=n,
                                                    ignore_eos=True))
    assert [o.outputs[0].token_ids for o in outs] == [e[:n] for e in expected[:3]]
