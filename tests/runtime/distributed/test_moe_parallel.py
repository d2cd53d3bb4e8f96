"""Mixture-of-experts models over several CPU ranks (gloo) against one process: experts
split like a dense MLP under TP, split whole with --enable-expert-parallel, layers over
pipeline stages; the same prompts, a KV pool that forces preemption, the same tokens.

qwen2-moe's tiny checkpoint has the most moving parts: a shared expert with its gate
(partial sums reduced with the experts'), a dense layer among sparse ones, top-4 of 8
experts without renormalization, QKV bias, a tied head."""
from __future__ import annotations

import functools

import pytest

from tests.runtime.distributed.conftest import run_llm_job
from tests.runtime.distributed.test_parallel_generate import ENGINE, GREEDY, PARAMS, PROMPTS

# (family, tensor, pipeline, expert parallel)
LAYOUTS = [("qwen2-moe", 2, 1, False), ("qwen2-moe", 2, 1, True),
           ("qwen2-moe", 2, 2, True), ("mixtral", 1, 2, False)]


@pytest.fixture(scope="module")
def run(tiny_model_factory, tmp_path_factory):
    @functools.cache
    def run_layout(family: str, tp: int, pp: int, ep: bool) -> dict:
        tmp = tmp_path_factory.mktemp(f"{family}-tp{tp}-pp{pp}-ep{int(ep)}")
        engine = {**ENGINE, "tensor_parallel_size": tp, "pipeline_parallel_size": pp,
                  "enable_expert_parallel": ep}
        return run_llm_job(tmp, tiny_model_factory(family), engine, PROMPTS, PARAMS)
    return run_layout


@pytest.mark.parametrize("family, tp, pp, ep", LAYOUTS,
                         ids=[f"{f}-tp{t}-pp{p}{'-ep' if e else ''}" for f, t, p, e in LAYOUTS])
def test_tokens_equal_single_process(run, family, tp, pp, ep):
    reference = run(family, 1, 1, False)
    assert reference["num_preemptions"] > 0, "the KV pool must force preemption"
    result = run(family, tp, pp, ep)
    assert result["token_ids"] == reference["token_ids"]


def test_each_rank_holds_its_experts(run):
    """8 experts of intermediate 32 (hidden 64): TP splits every expert in two, EP gives
    each rank 4 whole experts; the shared expert (64) and the router stay as they were."""
    tp_ranks = run("qwen2-moe", 2, 1, False)["ranks"]
    ep_ranks = run("qwen2-moe", 2, 1, True)["ranks"]
    for held in tp_ranks:
        params = held["params"]
        assert params["layers.0.mlp.experts.w13_weight"] == [8, 2 * 16, 64]
        assert params["layers.0.mlp.experts.w2_weight"] == [8, 64, 16]
    for held in ep_ranks:
        params = held["params"]
        assert params["layers.0.mlp.experts.w13_weight"] == [4, 2 * 32, 64]
        assert params["layers.0.mlp.experts.w2_weight"] == [4, 64, 32]
        assert params["layers.0.mlp.shared_expert.gate_up_proj.weight"] == [2 * 32, 64]
        assert params["layers.0.mlp.gate.weight"] == [8, 64]
        assert params["layers.1.mlp.gate_up_proj.weight"] == [2 * 64, 64]   # dense layer


def test_dummy_expert_weights_are_the_same_whatever_the_layout(tiny_model_factory, tmp_path):
    """load_format=dummy draws transformers' stacked expert tensors whole; each EP rank
    takes its experts from them."""
    model = tiny_model_factory("qwen3-moe")
    engine = {**ENGINE, "load_format": "dummy"}
    (tmp_path / "one").mkdir()
    (tmp_path / "ep").mkdir()
    one = run_llm_job(tmp_path / "one", model, engine, PROMPTS[:3], [GREEDY] * 3)
    split = run_llm_job(tmp_path / "ep", model,
                        {**engine, "tensor_parallel_size": 2, "enable_expert_parallel": True},
                        PROMPTS[:3], [GREEDY] * 3)
    assert split["token_ids"] == one["token_ids"]
