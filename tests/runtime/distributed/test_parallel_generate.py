"""TP, PP and TP x PP engines (CPU, gloo, one process per rank) against one process.

Same tiny fp32 checkpoint, same prompts: a shared prefix (prefix caching hits), a KV pool
far too small for the batch (preemption by recompute), chunked prefill, greedy rows and
one seeded random row. Every layout must produce exactly the single-process tokens, with
async scheduling (the default, for both): the driver plans step N+1 before step N's
tokens are back, and the first stage's TP ranks get those late tokens by broadcast.
"""
from __future__ import annotations

import functools
import json

import pytest

from kubellm.runtime.distributed.trace import overlaps, read_trace, timeline
from tests.runtime.distributed.conftest import run_llm_job

PREFIX = list(range(1000, 1012))  # three full 4-token blocks shared by every prompt
PROMPTS = [PREFIX + [2000 + 7 * i, 2001 + 7 * i, 2002 + 7 * i] for i in range(6)]
GREEDY = {"temperature": 0.0, "max_tokens": 12, "ignore_eos": True}
SEEDED = {"temperature": 0.9, "seed": 11, "max_tokens": 12, "ignore_eos": True}
PARAMS = [GREEDY] * 5 + [SEEDED]
ENGINE = {"dtype": "float32", "device": "cpu", "block_size": 4, "num_kv_blocks": 14,
          "max_model_len": 56, "max_num_batched_tokens": 40, "enable_prefix_caching": True}

# One KV block of one layer: K and V, 4 tokens, 2 KV heads of 16 floats.
BLOCK_LAYER_BYTES = 2 * 4 * 2 * 16 * 4
# The uneven pipeline sizes its pool from memory instead: stage 0 (3 layers) fits 14
# blocks, stage 1 (1 layer) 42; every rank must get the smaller pool.
UNEVEN_KV_GB = 14 * 3 * BLOCK_LAYER_BYTES / 2**30

# (family, tensor, pipeline, layers per stage or None for the even split)
LAYOUTS = [("llama-4layers", 2, 1, None),
           ("llama-4layers", 1, 2, "3,1"),
           ("llama-4layers", 2, 2, None),
           ("llama-4layers", 4, 1, None),   # 2 KV heads < 4 ranks: KV heads replicated
           ("qwen2", 2, 2, None)]           # QKV bias; tied head on the last stage


@pytest.fixture(scope="module")
def run(tiny_model_factory, tmp_path_factory):
    def run_layout(family: str, tp: int, pp: int, partition: str | None = None) -> dict:
        return run_once(family, tp, pp, partition)  # one cache key however it is called

    @functools.cache
    def run_once(family: str, tp: int, pp: int, partition: str | None) -> dict:
        tmp = tmp_path_factory.mktemp(f"{family}-tp{tp}-pp{pp}")
        env = {"KUBELLM_PIPELINE_TRACE": str(tmp / "trace")}
        engine = {**ENGINE, "tensor_parallel_size": tp, "pipeline_parallel_size": pp}
        if partition == "3,1":
            env["KUBELLM_PP_LAYER_PARTITION"] = partition
            engine.update(num_kv_blocks=None, cpu_kv_cache_gb=UNEVEN_KV_GB)
        result = run_llm_job(tmp, tiny_model_factory(family), engine, PROMPTS, PARAMS, env)
        result["trace_dir"] = str(tmp / "trace")
        return result
    return run_layout


@pytest.mark.parametrize("family, tp, pp, partition", LAYOUTS,
                         ids=[f"{f}-tp{t}-pp{p}" for f, t, p, _ in LAYOUTS])
def test_tokens_equal_single_process(run, family, tp, pp, partition):
    reference = run(family, 1, 1)
    assert reference["num_preemptions"] > 0, "the KV pool must force preemption"
    assert reference["prefix_hits"] > 0, "the shared prefix must hit the prefix cache"
    result = run(family, tp, pp, partition)
    assert result["num_preemptions"] > 0 and result["prefix_hits"] > 0
    assert result["run_ahead"] and result["late_steps"] > 0
    assert result["token_ids"] == reference["token_ids"]
    ranks = result["ranks"]
    assert [r["rank"] for r in ranks] == list(range(tp * pp))
    assert {r["kv_cache_shape"][0] for r in ranks} == {reference["num_kv_blocks"]}


def _by_rank(result: dict) -> dict[int, dict]:
    return {r["rank"]: r for r in result["ranks"]}


def test_each_rank_holds_only_its_shard(run):
    """TP 2 x PP 2 over 4 layers: hidden 64, 4 heads of 16, 2 KV heads, MLP 128."""
    ranks = _by_rank(run("llama-4layers", 2, 2))
    for rank, held in ranks.items():
        stage, tp_rank = divmod(rank, 2)
        assert (held["pp_rank"], held["tp_rank"]) == (stage, tp_rank)
        assert held["layers"] == [2 * stage, 2 * stage + 2]
        params = held["params"]
        layer_names = {n.split(".")[1] for n in params if n.startswith("layers.")}
        assert layer_names == {str(2 * stage), str(2 * stage + 1)}
        first = f"layers.{2 * stage}"
        # q: 2 of 4 heads, k and v: 1 of 2 heads, each 16 wide
        assert params[f"{first}.self_attn.qkv_proj.weight"] == [(2 + 1 + 1) * 16, 64]
        assert params[f"{first}.self_attn.o_proj.weight"] == [64, 32]
        assert params[f"{first}.mlp.gate_up_proj.weight"] == [2 * 64, 64]
        assert params[f"{first}.mlp.down_proj.weight"] == [64, 64]
        assert params[f"{first}.input_layernorm.weight"] == [64]  # norms are whole
        # the vocabulary is split too; the embedding lives on stage 0, norm + head on 1
        assert ("embed_tokens.weight" in params) == (stage == 0)
        assert ("lm_head.weight" in params) == ("norm.weight" in params) == (stage == 1)
        vocab_rows = params.get("embed_tokens.weight", params.get("lm_head.weight"))
        assert vocab_rows == [49152 // 2, 64]
        # this stage's KV cache: its 2 layers, 1 local KV head of 16
        assert held["num_kv_caches"] == 2 * 2
        assert held["kv_cache_shape"][1:] == [4, 1, 16]


def test_kv_pool_is_what_the_fullest_stage_fits(run):
    ranks = _by_rank(run("llama-4layers", 1, 2, "3,1"))
    assert [ranks[r]["num_kv_caches"] for r in (0, 1)] == [2 * 3, 2 * 1]
    assert [ranks[r]["kv_cache_shape"][0] for r in (0, 1)] == [14, 14]


def test_kv_heads_replicated_when_ranks_outnumber_them(run):
    for held in _by_rank(run("llama-4layers", 4, 1)).values():
        # one query head and one (shared) KV head per rank
        assert held["params"]["layers.0.self_attn.qkv_proj.weight"] == [3 * 16, 64]
        assert held["kv_cache_shape"][2] == 1


def test_tied_head_sits_on_the_last_stage(run):
    ranks = _by_rank(run("qwen2", 2, 2))
    for rank in (2, 3):  # stage 1 computes logits with its own copy of the embedding
        params = ranks[rank]["params"]
        assert "embed_tokens.weight" in params and "lm_head.weight" not in params
        assert params["layers.1.self_attn.qkv_proj.bias"] == [(2 + 1 + 1) * 16]


def test_pipeline_stages_overlap(run, capsys):
    events = read_trace(run("llama-4layers", 1, 2, "3,1")["trace_dir"])
    assert {e["stage"] for e in events} == {0, 1}
    found = overlaps(events)
    assert found, "no step had stage 0 on micro-batch m+1 while stage 1 ran micro-batch m"
    with capsys.disabled():
        print(f"\npipeline overlap in {len({f['step'] for f in found})} steps; step "
              f"{found[0]['step']}:\n{timeline(events, found[0]['step'])}")
    print(json.dumps(found[:3]))


def test_idle_workers_outlive_the_collective_timeout(tiny_model_dir, tmp_path):
    """Workers wait for the next step inside a collective that times out; the driver's
    heartbeat must keep them there through a quiet spell longer than the timeout."""
    result = run_llm_job(tmp_path, tiny_model_dir, {**ENGINE, "tensor_parallel_size": 2},
                         PROMPTS[:2], [GREEDY, GREEDY],
                         env={"KUBELLM_DIST_TIMEOUT_S": "10"}, idle_s=13)
    assert result["token_ids_after_idle"] == result["token_ids"]


def test_dummy_weights_are_the_same_whatever_the_layout(tiny_model_factory, tmp_path):
    """load_format=dummy draws every checkpoint tensor whole from a seed of its name, so
    a TP rank or PP stage holds its slice of the single-process weights: benchmarks can
    check TP/PP against TP=1 without writing a checkpoint."""
    model = tiny_model_factory("llama-4layers")
    engine = {**ENGINE, "load_format": "dummy"}
    (tmp_path / "one").mkdir()
    (tmp_path / "split").mkdir()
    one = run_llm_job(tmp_path / "one", model, engine, PROMPTS[:3], [GREEDY] * 3)
    split = run_llm_job(tmp_path / "split", model,
                        {**engine, "tensor_parallel_size": 2, "pipeline_parallel_size": 2},
                        PROMPTS[:3], [GREEDY] * 3)
    assert split["token_ids"] == one["token_ids"]
