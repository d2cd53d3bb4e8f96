"""The l2_prefetch switch's hooks (worker/weight_prefetch.py) on a real tiny Llama: which
layer's weights each linear layer hands on, in the order the model calls them, only in
steps of few tokens and only while the switch is on. The stream work (a CUDA side stream
and the prefetch kernel) is replaced by a recorder here; tests/gpu runs it for real."""
from __future__ import annotations

import pytest
import torch

from kubellm.runtime import LLM, SamplingParams
from kubellm.runtime.worker import weight_prefetch
from kubellm.runtime.worker.weight_prefetch import (WeightPrefetcher, linear_layers,
                                                    weight_tensors)


@pytest.fixture
def llm(tiny_model_dir):
    return LLM(tiny_model_dir, dtype="float32", block_size=16, max_num_batched_tokens=64)


def _record_calls(model) -> list[torch.nn.Module]:
    called = []
    for layer in linear_layers(model):
        layer.register_forward_pre_hook(lambda m, _a: called.append(m))
    return called


def test_module_order_is_call_order(llm):
    model = llm.engine.executor.model
    called = _record_calls(model)
    llm.generate([[5, 6, 7]], SamplingParams(temperature=0, max_tokens=2))
    layers = linear_layers(model)
    assert len(layers) == 4 * model.args.num_layers        # qkv, o, gate_up, down
    per_step = len(layers)
    assert len(called) == 2 * per_step                      # prefill, one decode
    assert called[:per_step] == layers and called[per_step:] == layers


def test_weight_tensors_largest_first(llm):
    layer = linear_layers(llm.engine.executor.model)[0]
    assert weight_tensors(layer) == [layer.weight]


@pytest.fixture
def recorded(monkeypatch):
    """Pretend the tensors are on a GPU and record launches instead of running them."""
    launches = []
    monkeypatch.setattr(weight_prefetch, "on_gpu", lambda x: isinstance(x, torch.Tensor))
    monkeypatch.setattr(WeightPrefetcher, "_launch",
                        lambda self, index, device: launches.append(index))
    monkeypatch.setattr(WeightPrefetcher, "join", lambda self: setattr(self, "pending", False))
    return launches


@pytest.mark.parametrize("when", ["after", "before"])
def test_each_layer_prefetches_the_next_in_small_steps(llm, recorded, when):
    model = llm.engine.executor.model
    prefetcher = WeightPrefetcher(model, max_rows=4, when=when)
    n = len(prefetcher.layers)
    llm.generate([[5, 6, 7]], SamplingParams(temperature=0, max_tokens=2, ignore_eos=True))
    # the 3-token prefill and the decode: the first layer's weights from the model's
    # pre-hook (the embedding's time), then each layer's successor once
    assert recorded == list(range(n)) * 2
    assert prefetcher.step_order == list(range(n)) and prefetcher.launched == 2 * n
    assert not prefetcher.pending                              # joined at forward's end
    recorded.clear()
    llm.generate([list(range(5, 15))], SamplingParams(temperature=0, max_tokens=1))
    assert recorded == []                                      # 10 tokens > max_rows
    prefetcher.remove()
    llm.generate([[5, 6, 7]], SamplingParams(temperature=0, max_tokens=1))
    assert recorded == []                                      # hooks gone


def test_switch_off_prefetches_nothing_and_tokens_do_not_change(llm, recorded):
    model = llm.engine.executor.model
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    plain = llm.generate([[5, 6, 7], [9, 10]], params)
    switches = llm.engine.executor.switches
    prefetcher = WeightPrefetcher(model, enabled=lambda: switches.l2_prefetch)
    switches.l2_prefetch = False
    llm.generate([[5, 6, 7]], params)
    assert recorded == []
    switches.l2_prefetch = True
    again = llm.generate([[5, 6, 7], [9, 10]], params)
    assert recorded and prefetcher.launched
    assert [o.outputs[0].token_ids for o in again] == [o.outputs[0].token_ids for o in plain]


def test_runner_installs_hooks_only_on_cuda(llm):
    assert llm.engine.executor.prefetcher is None               # a CPU engine


def test_bad_mode_and_when_are_refused(llm):
    model = llm.engine.executor.model
    with pytest.raises(ValueError, match="mode must be one of"):
        WeightPrefetcher(model, mode="lines")
    with pytest.raises(ValueError, match="when must be one of after, before"):
        WeightPrefetcher(model, when="during")
