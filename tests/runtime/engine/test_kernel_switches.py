"""Every kernel switch gives transformers' greedy tokens through the whole engine: the
Triton backend on CPU (kernels in triton's interpreter) with chunked prefill and
prefix caching, so that steps mix decodes, fresh prompts and chunks with cached
context. And the switches' spelling: a bad one is a config error naming the field."""
from __future__ import annotations

import random

import pytest
import torch

from kubellm.runtime import LLM, SamplingParams
from kubellm.runtime.config import EngineConfig
from kubellm.runtime.config_sources import ConfigError
from kubellm.runtime.kernel_switches import (HELP, KernelSwitches, device_capability,
                                             hardware_defaults)

MAX_TOKENS = 6
# the interpreter is slow: the fused cache write alone (its keys never materialised),
# then everything on (the prefill kernel reading the keys the fused kernel returns)
SWITCH_SETS = {
    "rope_kv_write": "rope_kv_write",
    "all": "rope_kv_write,prefill_attention,prefill_attention_tma",
}


@pytest.fixture(scope="module")
def reference(tiny_model_factory):
    from transformers import AutoModelForCausalLM
    path = tiny_model_factory("llama3")
    rng = random.Random(7)
    shared = [rng.randrange(100, 49000) for _ in range(24)]
    prompts = [shared + [rng.randrange(100, 49000) for _ in range(n)] for n in (3, 30)]
    prompts += [[rng.randrange(100, 49000) for _ in range(n)] for n in (1, 41)]
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    expected = []
    for p in prompts:
        ids = model.generate(torch.tensor([p]), do_sample=False, max_new_tokens=MAX_TOKENS,
                             min_new_tokens=MAX_TOKENS, pad_token_id=0)
        expected.append(ids[0, len(p):].tolist())
    return path, prompts, expected


@pytest.mark.parametrize("switches", list(SWITCH_SETS))
def test_greedy_tokens_match_transformers(reference, switches):
    path, prompts, expected = reference
    llm = LLM(path, dtype="float32", attention_backend="triton", block_size=8,
              max_num_batched_tokens=32, kernel_switches=SWITCH_SETS[switches])
    runner = llm.engine.executor
    assert runner.switches.enabled() == [s for s in SWITCH_SETS[switches].split(",") if s]
    assert all(layer.switches is runner.switches for layer in runner.attn_layers)
    params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
    outs = llm.generate(prompts, params)
    assert [o.outputs[0].token_ids for o in outs] == expected
    assert llm.engine.kv.prefix_hits > 0, "the shared prefix was meant to be cached"


def test_switches_parse_and_name_the_field():
    assert KernelSwitches.parse("").enabled() == []
    both = KernelSwitches.parse(" rope_kv_write=on , prefill_attention ")
    assert both.enabled() == ["rope_kv_write", "prefill_attention"]
    assert KernelSwitches.parse(both.describe()) == both
    assert KernelSwitches.parse("rope_kv_write,rope_kv_write=off").enabled() == []
    assert set(HELP) == set(KernelSwitches.__dataclass_fields__)   # every switch explained
    with pytest.raises(ConfigError, match="kernel_switches.*unknown switch 'fused_gemm'"):
        EngineConfig(kernel_switches="fused_gemm")
    with pytest.raises(ConfigError, match="kernel_switches.*expected on or off"):
        EngineConfig(kernel_switches="rope_kv_write=maybe")
    config = EngineConfig.from_sources(env={"KUBELLM_KERNEL_SWITCHES": "prefill_attention"})
    assert KernelSwitches.parse(config.kernel_switches).prefill_attention


def test_hopper_defaults_to_the_tma_prefill_kernel_and_the_user_can_turn_it_off():
    """What won on the H200 is on by default from compute capability 9.0; older GPUs and
    the CPU keep every switch off; the user's text applies on top of the defaults."""
    tma = ["prefill_attention", "prefill_attention_tma"]
    assert hardware_defaults((9, 0)).enabled() == tma
    assert hardware_defaults((10, 0)).enabled() == tma
    assert hardware_defaults((8, 9)).enabled() == []
    assert hardware_defaults(None).enabled() == []
    assert KernelSwitches.parse("", (9, 0)).enabled() == tma
    assert KernelSwitches.parse("prefill_attention_tma=off", (9, 0)).enabled() == \
        ["prefill_attention"]
    assert KernelSwitches.parse("rope_kv_write", (8, 0)).enabled() == ["rope_kv_write"]
    assert device_capability(torch.device("cpu")) is None


def test_the_engine_on_cpu_keeps_every_switch_off(reference):
    path, _, _ = reference
    llm = LLM(path, dtype="float32", max_num_batched_tokens=32, max_model_len=64)
    assert llm.engine.executor.switches.enabled() == []
