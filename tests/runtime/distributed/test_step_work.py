"""In one process: rank layout, layer partition, micro-batch split, and the per-step
message — a rank that receives only the StepWork must build exactly the model inputs the
single-process runner builds from the scheduler's full requests."""
from __future__ import annotations

import itertools
import pickle
import random

import pytest
import torch

from kubellm.runtime.config import EngineConfig
from kubellm.runtime.config_sources import ConfigError
from kubellm.runtime.distributed.layout import RankLayout, layer_partition
from kubellm.runtime.distributed.step_work import (BlockTableDiffs, BlockTableMirror, StepWork,
                                                  split_micro_batches)
from kubellm.runtime.core.kv_cache import KVCacheManager
from kubellm.runtime.worker.model_runner import ModelRunner
from kubellm.runtime.models.llama import LlamaArgs, LlamaForCausalLM
from kubellm.runtime.core.request import Request
from kubellm.runtime.core.sampling_params import SamplingParams
from kubellm.runtime.core.scheduler import ScheduledRequest, Scheduler, SchedulerOutput


def test_ranks_are_stage_major():
    grid = [RankLayout(r, tp_size=2, pp_size=3) for r in range(6)]
    assert [(g.pp_rank, g.tp_rank) for g in grid] == list(itertools.product(range(3), range(2)))
    assert grid[3].prev_stage_rank == 1 and grid[3].next_stage_rank == 5
    assert grid[3].tp_group_ranks(1) == [2, 3]
    assert grid[0].is_driver and grid[4].is_last_stage and grid[4].last_stage_leader == 4
    with pytest.raises(ValueError):
        RankLayout(6, tp_size=2, pp_size=3)


def test_even_partition_gives_extra_layers_to_the_first_stages():
    assert layer_partition(7, 3) == [(0, 3), (3, 5), (5, 7)]
    assert layer_partition(4, 1) == [(0, 4)]


def test_partition_override_from_config_or_env():
    assert layer_partition(4, 2, "1,3") == [(0, 1), (1, 4)]
    config = EngineConfig.from_sources(env={"KUBELLM_PP_LAYER_PARTITION": "3,1"},
                                       pipeline_parallel_size=2)
    assert config.pp_layer_partition == "3,1"


@pytest.mark.parametrize("override, why", [("2,2,2", "3 counts"), ("4,0", "at least one"),
                                           ("a,b", "comma-separated")])
def test_bad_partition_is_refused_by_the_config(override, why):
    with pytest.raises(ConfigError, match="pp_layer_partition") as err:
        EngineConfig(pipeline_parallel_size=2, pp_layer_partition=override)
    assert why in str(err.value)


def test_partition_must_cover_the_model():
    with pytest.raises(ConfigError, match="pp_layer_partition.*adds up to 5"):
        layer_partition(4, 2, "3,2")
    with pytest.raises(ConfigError, match="pipeline_parallel_size"):
        layer_partition(2, 3)


def test_micro_batches_cover_everything_in_order():
    rng = random.Random(0)
    for _ in range(300):
        tokens = [rng.choice([1, 1, 1, 7, 40]) for _ in range(rng.randint(1, 12))]
        groups = rng.randint(1, 5)
        split = split_micro_batches(tokens, groups)
        assert len(split) == min(groups, len(tokens))
        assert split[0][0] == 0 and split[-1][1] == len(tokens)
        assert all(lo < hi for lo, hi in split)
        assert all(a[1] == b[0] for a, b in zip(split, split[1:]))


def test_micro_batches_balance_tokens():
    assert split_micro_batches([1] * 8, 2) == [(0, 4), (4, 8)]
    assert split_micro_batches([10, 1, 1, 1, 1], 2) == [(0, 1), (1, 5)]
    assert split_micro_batches([3, 3, 3], 4) == [(0, 1), (1, 2), (2, 3)]


def _runner() -> ModelRunner:
    args = LlamaArgs(vocab_size=64, hidden_size=16, intermediate_size=32, num_layers=1,
                     num_heads=2, num_kv_heads=1, head_dim=8, rms_norm_eps=1e-5,
                     rope_theta=10000.0, rope_scaling=None, max_position=128,
                     tie_word_embeddings=False)
    return ModelRunner(LlamaForCausalLM(args), None, torch.device("cpu"), torch.float32,
                       block_size=4)


def _schedule() -> tuple[SchedulerOutput, list[list[int]]]:
    """Decodes, a whole prefill, a prefill chunk that does not sample yet, and the last
    chunk of a prefill that started after a prefix-cache hit."""
    def request(i, prompt_len, outputs=0):
        r = Request(f"r{i}", list(range(10 * i, 10 * i + prompt_len)), SamplingParams())
        for t in range(outputs):
            r.append_token(50 + t)
        return r
    reqs = [request(0, 5, 3), request(1, 9, 1), request(2, 6), request(3, 11), request(4, 13)]
    scheduled = [ScheduledRequest(reqs[0], 1, 7), ScheduledRequest(reqs[1], 1, 9),
                 ScheduledRequest(reqs[2], 6, 0), ScheduledRequest(reqs[3], 5, 0),
                 ScheduledRequest(reqs[4], 5, 8)]
    tables = [[3, 4], [5, 6, 7], [8, 9], [10, 11, 12], [13, 14, 15, 16]]
    return SchedulerOutput(scheduled), tables


@pytest.mark.parametrize("num_micro_batches", [1, 2, 3])
def test_step_work_rebuilds_the_runners_inputs(num_micro_batches):
    runner = _runner()
    out, tables = _schedule()
    work = StepWork.from_schedule(7, out, tables, num_micro_batches, BlockTableDiffs())
    work = pickle.loads(pickle.dumps(work))  # what broadcast_object_list does to it
    assert work.samples == [True, True, True, False, True]
    rebuilt_tables = BlockTableMirror().rebuild(work)
    assert rebuilt_tables == tables
    for m, (lo, hi) in enumerate(work.micro_batches):
        direct = runner.prepare_inputs(SchedulerOutput(out.scheduled[lo:hi]), tables[lo:hi])
        received, received_tables = work.scheduler_output(m, rebuilt_tables)
        rebuilt = runner.prepare_inputs(received, received_tables)
        for a, b in zip(direct[:2], rebuilt[:2]):           # token ids, positions
            assert torch.equal(a, b)
        for field in ("slot_mapping", "block_tables", "seq_lens", "cu_seqlens_q"):
            assert torch.equal(getattr(direct[2], field), getattr(rebuilt[2], field)), field
        assert direct[2].query_lens_cpu == rebuilt[2].query_lens_cpu
        assert torch.equal(torch.as_tensor(direct[3]), torch.as_tensor(rebuilt[3]))  # rows
        assert work.num_samples(m) == sum(s.samples for s in out.scheduled[lo:hi])
        assert work.num_tokens(m) == sum(s.num_new_tokens for s in out.scheduled[lo:hi])


def test_block_table_diffs_rebuild_every_table_through_preemption_and_id_reuse():
    """A real scheduler on a pool far too small: tables grow, are freed by preemption and
    rebuilt (prefix-cache hits included), sequences sit steps out, finished ids come
    back as new requests. Each rank's rebuilt tables must equal the driver's, every step,
    while most steps send only new blocks."""
    kv = KVCacheManager(num_blocks=12, block_size=2)
    scheduler = Scheduler(kv, 10, 6, "fcfs", 4)
    diffs, mirror = BlockTableDiffs(), BlockTableMirror()
    rng = random.Random(1)
    ids = itertools.cycle([f"r{i}" for i in range(5)])
    num_steps = sent_whole = sent_diff = preempted = 0
    for round_ in range(8):
        for _ in range(3):
            rid = next(ids)
            if scheduler.get(rid) is None:  # a finished id comes back as a new request
                prompt = [7, 7, 7, 7] + [rng.randrange(100) for _ in range(rng.randint(1, 6))]
                request = Request(rid, prompt, SamplingParams())
                request.max_tokens = rng.randint(2, 8)
                scheduler.add_request(request)
        while scheduler.has_unfinished():
            out = scheduler.schedule()
            tables = [list(kv.block_table(s.request.request_id)) for s in out.scheduled]
            work = StepWork.from_schedule(num_steps, out, tables, 2, diffs)
            assert mirror.rebuild(pickle.loads(pickle.dumps(work))) == tables
            sent_whole += sum(whole for whole, _ in work.table_updates)
            sent_diff += sum(not whole for whole, _ in work.table_updates)
            preempted += len(out.preempted)
            num_steps += 1
            sampled = {s.request.request_id: 3 for s in out.scheduled if s.samples}
            for r in scheduler.update(out, sampled):
                if r.num_output_tokens >= r.max_tokens:
                    scheduler.finish_request(r, "length")
    assert preempted > 0 and kv.prefix_hits > 0
    assert sent_diff > sent_whole


def test_late_tokens_travel_as_placeholders_with_their_rows():
    """Async scheduling: a decode planned before its input token is back carries a
    placeholder; the first stage fills row r of micro-batch m from late token i."""
    out, tables = _schedule()
    late = [out.scheduled[0].request, out.scheduled[1].request]  # both decodes wait
    for request in late:
        request.all_token_ids.pop()   # the token is still on the device
        request.num_pending_tokens = 1
    work = StepWork.from_schedule(0, out, tables, 2, BlockTableDiffs())
    assert work.late == [True, True, False, False, False]
    assert work.token_ids[:2] == [[0], [0]]
    assert work.micro_batches == [(0, 4), (4, 5)]
    assert work.late_rows(0) == ([0, 1], [0, 1])  # rows 0 and 1 take late tokens 0 and 1
    assert work.late_rows(1) == ([], [])
    work = StepWork.from_schedule(1, SchedulerOutput(out.scheduled[2:] + out.scheduled[1:2]),
                                  tables[2:] + tables[1:2], 1, BlockTableDiffs())
    # after a 6-token prefill and two chunks of 5: row 16 holds the one late token
    assert work.late_rows(0) == ([16], [0])
