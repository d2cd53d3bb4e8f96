"""Async scheduling on CUDA: the engine launches step N+1 before step N's samples are
back, through CUDA graphs, pinned copies and one stream. On the CPU the logic is tested
against the waiting engine token for token; here the device ordering is: a mixed load
(prefills beside decodes, a small pool that preempts, requests finishing at different
steps) gives the same tokens as the waiting engine by the top-5 rule, every block comes
back, and the device really ran ahead (it sat idle less than when waiting)."""
from __future__ import annotations

import random

import pytest
import torch

from benchmarks.common.agreement import first_disagreement
from benchmarks.common.shapes import LLAMA3_8B, write_config

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip(reason="needs a CUDA GPU", allow_module_level=True)


def _requests(rng):
    return [[rng.randrange(16, 120000) for _ in range(rng.randint(8, 700))]
            for _ in range(96)]


def test_run_ahead_matches_waiting_on_cuda(tmp_path, make_llm):
    from kubellm.runtime import SamplingParams
    model_dir = write_config(LLAMA3_8B, tmp_path / "m", num_hidden_layers=4)
    llm = make_llm(model_dir, load_format="dummy", skip_tokenizer_init=True, max_model_len=2048,
                   max_num_seqs=64, max_num_batched_tokens=1024, num_kv_blocks=600)
    engine = llm.engine
    rng = random.Random(0)
    prompts = _requests(rng)
    params = [SamplingParams(temperature=0, max_tokens=rng.randint(1, 40), ignore_eos=True,
                             detokenize=False, logprobs=5) for _ in prompts]
    runs = {}
    for run_ahead in (False, True):
        engine.set_async_scheduling(run_ahead)
        before = engine.scheduler.num_preemptions
        runs[run_ahead] = llm.generate(prompts, params)
        engine.set_async_scheduling(run_ahead)       # lands the step still in flight
        assert engine.scheduler.num_preemptions > before, "the pool should preempt"
        assert engine.kv.num_free_blocks == engine.kv.num_blocks
    failures = []
    for i, (w, a) in enumerate(zip(runs[False], runs[True])):
        w, a = w.outputs[0], a.outputs[0]
        assert len(w.token_ids) == len(a.token_ids) == params[i].max_tokens
        msg = first_disagreement(a.token_ids, a.logprobs, w.token_ids, w.logprobs,
                                 names=("ahead", "waiting"))
        if msg:
            failures.append(f"request {i}: {msg}")
    assert not failures, failures


def test_run_ahead_leaves_the_device_less_idle(tmp_path, make_llm):
    """Workload W's decode point (Llama-3-8B shape, batch 256, context 512): the device's
    step (~12 ms) outlasts the host's work (~2-4 ms), so running ahead must leave the
    device almost never idle, where waiting leaves it idle for the host's whole share."""
    from kubellm.runtime import SamplingParams
    from kubellm.runtime.cli.bench.steady import device_idle, fill_until_decoding
    model_dir = write_config(LLAMA3_8B, tmp_path / "m")
    llm = make_llm(model_dir, load_format="dummy", skip_tokenizer_init=True, max_model_len=1024,
                   max_num_seqs=256, max_num_batched_tokens=8192, gpu_memory_utilization=0.8)
    engine = llm.engine
    rng = random.Random(1)
    idle = {}
    for run_ahead in (False, True):
        engine.set_async_scheduling(run_ahead)
        params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True,
                                detokenize=False)
        ids = [f"{run_ahead}-{i}" for i in range(256)]
        fill_until_decoding(engine, {i: [rng.randrange(16, 120000) for _ in range(512)]
                                     for i in ids}, params)
        for _ in range(4):      # first uses (lazily loaded CUDA kernels) outside the trace
            engine.step()
        engine.executor.trace_device(True)
        for _ in range(24):
            engine.step()
        idle[run_ahead] = device_idle(engine.executor)["device_idle_fraction"]
        engine.executor.trace_device(False)
        for i in ids:
            engine.abort_request(i)
    assert idle[True] < 0.02 and idle[False] > 3 * idle[True], idle
