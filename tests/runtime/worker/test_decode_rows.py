"""The decode fast path (inputs derived from the step before, worker/decode_rows.py)
must give exactly the arrays the general path builds from the requests, through joins,
leaves, preemptions, block-boundary crossings, mixed prefill/decode steps and request ids
reused by new requests. Every step the fast path takes is checked against the general
path on the same step."""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from kubellm.runtime import LLM, SamplingParams
from kubellm.runtime.core.scheduler import SchedulerOutput
from kubellm.runtime.worker.block_table_array import BlockTableArray
from kubellm.runtime.worker.decode_rows import DecodeRows

ENGINE = {"block_size": 4, "max_num_seqs": 12, "max_num_batched_tokens": 48,
          "max_model_len": 256, "async_scheduling": True}
FIELDS = ("token_ids", "positions", "slots", "sample_rows", "late_rows", "late_sources",
          "table", "seq_lens", "cu", "sample_seqs")


def _same_device_inputs(fast, general) -> None:
    (tok_f, pos_f, meta_f, rows_f, req_f), (tok_g, pos_g, meta_g, rows_g, req_g) = \
        fast, general
    for a, b in ((tok_f, tok_g), (pos_f, pos_g), (rows_f, rows_g),
                 (meta_f.slot_mapping, meta_g.slot_mapping),
                 (meta_f.block_tables, meta_g.block_tables),
                 (meta_f.seq_lens, meta_g.seq_lens), (meta_f.cu_seqlens_q, meta_g.cu_seqlens_q)):
        assert a.dtype == b.dtype and torch.equal(a, b)
    for name in ("max_seqlen_q", "seq_lens_cpu", "query_lens_cpu", "is_decode_only",
                 "num_decodes"):
        assert getattr(meta_f, name) == getattr(meta_g, name), name
    assert len(req_f) == len(req_g) and all(a is b for a, b in zip(req_f, req_g))


def _checked(runner, counts):
    """Wrap DecodeRows.derive: whenever it gives inputs, compare them (host arrays and
    what goes to the device) with the general path's for the same step."""
    derive = runner._rows.derive

    def checking(out, block_tables, ahead_of, tables):
        fast = derive(out, block_tables, ahead_of, tables)
        counts["steps"] += 1
        if fast is None:
            return None
        counts["fast"] += 1
        counts["rows"] += len(out.requests)
        # the general path with a block table built from scratch (the runner's own
        # BlockTableArray is what the fast path may have got wrong)
        kept, runner._tables = runner._tables, BlockTableArray()
        try:
            general = runner.host_inputs(SchedulerOutput(out.scheduled), block_tables,
                                         ahead_of)
        finally:
            runner._tables = kept
        for name in FIELDS:
            a, b = np.asarray(getattr(fast, name)), np.asarray(getattr(general, name))
            assert a.shape == b.shape and np.array_equal(a, b), name
        assert fast.query_lens == general.query_lens
        assert all(a is b for a, b in zip(fast.requests, general.requests))
        _same_device_inputs(runner._to_device(fast, ahead_of),
                            runner._to_device(general, ahead_of))
        return fast
    runner._rows.derive = checking


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fast_path_equals_general_path_over_random_steps(tiny_model_dir, seed):
    rng = random.Random(seed)
    # a pool small enough to preempt (4-token blocks: boundaries crossed often)
    llm = LLM(tiny_model_dir, num_kv_blocks=48, **ENGINE)
    engine = llm.engine
    runner = engine.executor
    assert isinstance(runner._rows, DecodeRows)
    counts = {"steps": 0, "fast": 0, "rows": 0}
    _checked(runner, counts)

    def add(request_id: str, prompt_len: int | None = None) -> None:
        n = prompt_len or rng.choice([1, 2, 3, 5, 9, 17, 30, 60])
        engine.add_request(request_id, [rng.randrange(100, 49000) for _ in range(n)],
                           SamplingParams(temperature=0.0, ignore_eos=True,
                                          max_tokens=rng.randint(1, 40)))
    for i in range(8):
        add(f"r{i}")
    next_id, preempted_seen = 8, False
    for _ in range(400):
        engine.step()
        if rng.random() < 0.15:
            add(f"r{next_id}")        # joins in the middle of decoding
            next_id += 1
        if rng.random() < 0.1 and engine.scheduler.running:
            # aborted while its step is in flight, and (mostly) its id used again at
            # once by a one-token prompt: a decode-shaped row that sampled nothing
            request_id = rng.choice(engine.scheduler.running).request_id.split("#")[0]
            engine.abort_request(request_id)
            if rng.random() < 0.7:
                add(request_id, prompt_len=1)
        preempted_seen |= engine.scheduler.num_preemptions > 0
        if not engine.has_unfinished_requests():
            break
    while engine.has_unfinished_requests():
        engine.step()
    engine.step()
    assert engine.kv.num_free_blocks == engine.kv.num_blocks
    # the check ran: the fast path took many steps, and the mix exercised preemption
    assert counts["fast"] > 50 and counts["steps"] > counts["fast"], counts
    assert preempted_seen
