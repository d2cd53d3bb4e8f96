"""Every kernel switch gives transformers' greedy tokens through the whole engine: the
Triton backend on CPU (kernels in triton's interpreter) with chunked prefill and
prefix caching, so that steps mix decodes, fresh prompts and chunks with cached
context. And the switches' spelling: a bad one is a config error naming the field."""
from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
import torch

import kubellm.kernels.paged_attention as paged_attention_module
from kubellm.runtime import LLM, SamplingParams
from kubellm.runtime.attention import triton_backend
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
    # the paged kernel alone on every step, its decode rows of mixed steps in decode tiles
    "decodes_apart": "paged_decodes_apart",
}


def shared_prefix_prompts(seed: int) -> list[list[int]]:
    """Two prompts behind a shared 24-token prefix (the second hits the prefix cache),
    a one-token prompt and a 41-token one (chunked at 32 tokens a step)."""
    rng = random.Random(seed)
    shared = [rng.randrange(100, 49000) for _ in range(24)]
    prompts = [shared + [rng.randrange(100, 49000) for _ in range(n)] for n in (3, 30)]
    return prompts + [[rng.randrange(100, 49000) for _ in range(n)] for n in (1, 41)]


@pytest.fixture(scope="module")
def reference(tiny_model_factory):
    from transformers import AutoModelForCausalLM
    path = tiny_model_factory("llama3")
    prompts = shared_prefix_prompts(7)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    expected = []
    for p in prompts:
        ids = model.generate(torch.tensor([p]), do_sample=False, max_new_tokens=MAX_TOKENS,
                             min_new_tokens=MAX_TOKENS, pad_token_id=0)
        expected.append(ids[0, len(p):].tolist())
    return path, prompts, expected


@pytest.mark.parametrize("switches", list(SWITCH_SETS))
def test_greedy_tokens_match_transformers(reference, switches, monkeypatch):
    path, prompts, expected = reference
    # these chunks are short: the prefill kernel serves them only below its usual bound
    monkeypatch.setattr(triton_backend, "PREFILL_KERNEL_MIN_QUERY", 1)
    prefill_calls = count_calls(monkeypatch, triton_backend, "_prefill_attention")
    decode_tile_launches = []   # the paged kernel's launches of decode tiles in mixed steps
    real_launch = paged_attention_module._launch
    monkeypatch.setattr(paged_attention_module, "_launch", lambda *args, **kwargs: (
        decode_tile_launches.append(kwargs["queries"] == 1), real_launch(*args, **kwargs))[1])
    llm = LLM(path, dtype="float32", attention_backend="triton", block_size=8,
              max_num_batched_tokens=32, kernel_switches=SWITCH_SETS[switches])
    runner = llm.engine.executor
    assert runner.switches.enabled() == [s for s in SWITCH_SETS[switches].split(",") if s]
    assert all(layer.switches is runner.switches for layer in runner.attn_layers)
    params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
    outs = llm.generate(prompts, params)
    assert [o.outputs[0].token_ids for o in outs] == expected
    assert llm.engine.kv.prefix_hits > 0, "the shared prefix was meant to be cached"
    assert (prefill_calls[0] > 0) == ("prefill_attention" in SWITCH_SETS[switches])
    assert any(decode_tile_launches) == ("paged_decodes_apart" in SWITCH_SETS[switches])


def test_steps_of_many_short_chunks_take_the_prefill_kernel_and_keep_the_tokens(
        reference, monkeypatch):
    """The step-size bound scaled down to these tiny steps (chunks stay under the chunk
    bound): steps of at least 20 new tokens take the prefill kernel for their prompts
    and the paged kernel's decode tiles for their decodes, smaller ones the paged kernel
    alone; the tokens are transformers'."""
    path, prompts, expected = reference
    monkeypatch.setattr(triton_backend, "PREFILL_KERNEL_MIN_STEP_TOKENS", 20)
    prefill_calls = count_calls(monkeypatch, triton_backend, "_prefill_attention")
    paged_calls = count_calls(monkeypatch, triton_backend, "_paged_attention")
    llm = LLM(path, dtype="float32", attention_backend="triton", block_size=8,
              max_num_batched_tokens=32, kernel_switches="prefill_attention")
    outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS,
                                                ignore_eos=True))
    assert [o.outputs[0].token_ids for o in outs] == expected
    assert prefill_calls[0] > 0 and paged_calls[0] > 0


def count_calls(monkeypatch, module, name: str) -> list[int]:
    """Wrap ``module.name`` to count its calls: the returned one-item list."""
    calls, real = [0], getattr(module, name)

    def counted(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)
    monkeypatch.setattr(module, name, counted)
    return calls


def test_only_steps_with_a_long_chunk_or_many_tokens_take_the_prefill_kernel(monkeypatch):
    """An eager step with short prompts waits on the host's launches, so the paged kernel
    serves it whole (one launch a layer); a chunk of PREFILL_KERNEL_MIN_QUERY tokens or
    more, or a step of PREFILL_KERNEL_MIN_STEP_TOKENS, takes the prefill kernel beside the
    paged one for the step's decodes. Decode steps and the switch off never take it."""
    kernels = {}
    for name in ("_prefill_attention", "_paged_attention"):
        monkeypatch.setattr(triton_backend, name, lambda *args, **kwargs: None)
        kernels[name] = count_calls(monkeypatch, triton_backend, name)
    on = KernelSwitches.parse("prefill_attention")
    bound = triton_backend.PREFILL_KERNEL_MIN_QUERY
    many = triton_backend.PREFILL_KERNEL_MIN_STEP_TOKENS
    q = torch.zeros(bound + 2, 4, 16)

    def step(max_seqlen_q, is_decode_only=False, switches=on, num_decodes=2, tokens=None,
             group=1):
        for calls in kernels.values():
            calls[0] = 0
        tokens = 64 if tokens is None else tokens   # a step a mixed-step graph could hold
        meta = SimpleNamespace(is_decode_only=is_decode_only, max_seqlen_q=max_seqlen_q,
                               num_decodes=num_decodes, block_tables=torch.zeros(3, 1),
                               seq_lens=torch.zeros(3), cu_seqlens_q=torch.zeros(4),
                               slot_mapping=torch.zeros(tokens))
        queries = torch.zeros(q.shape[0], 4 * group, 16)   # group query heads per KV head
        triton_backend.attend(queries, q, q, None, None, meta, 1.0, switches)
        return kernels["_prefill_attention"][0], kernels["_paged_attention"][0]

    assert step(bound - 1) == (0, 1)
    assert step(bound) == (1, 1)
    assert step(bound, num_decodes=0) == (1, 0)
    assert step(1, is_decode_only=True) == (0, 1)
    assert step(bound, switches=KernelSwitches()) == (0, 1)
    assert step(bound, switches=None) == (0, 1)
    # short chunks, but more tokens in the step than a mixed-step graph holds
    assert step(700, tokens=many) == (1, 1)
    assert step(700, tokens=many - 1) == (0, 1)
    assert step(1, is_decode_only=True, tokens=many) == (0, 1)
    assert step(700, tokens=many, switches=KernelSwitches()) == (0, 1)
    # ... for models of up to PREFILL_KERNEL_STEP_MAX_GROUP query heads per KV head
    most = triton_backend.PREFILL_KERNEL_STEP_MAX_GROUP
    assert step(700, tokens=many, group=most) == (1, 1)
    assert step(700, tokens=many, group=most + 1) == (0, 1)
    assert step(bound, tokens=many, group=most + 1) == (1, 1)   # a long chunk: any group


def test_no_mixed_graph_step_takes_the_prefill_kernel():
    """A mixed-step graph is captured through the paged kernel alone: its largest token
    count stays under the step-size bound, its chunks under the chunk bound."""
    from kubellm.runtime.worker import mixed_graphs
    assert mixed_graphs.MAX_TOKENS < triton_backend.PREFILL_KERNEL_MIN_STEP_TOKENS
    assert max(mixed_graphs.token_sizes(1 << 20)) < triton_backend.PREFILL_KERNEL_MIN_STEP_TOKENS


def test_decode_rows_ask_for_the_long_split_and_say_they_are_decode_only(monkeypatch):
    """decode_long_split reaches the paged kernel of decode-only steps and of a step's
    decode rows beside the prefill kernel; every decode-only call says so (programs find
    their sequence without a search); a mixed step through the paged kernel is not."""
    seen = []
    monkeypatch.setattr(triton_backend, "_paged_attention",
                        lambda *args, **kwargs: seen.append(
                            (kwargs["long_split"], kwargs.get("decode_only", False))))
    monkeypatch.setattr(triton_backend, "_prefill_attention", lambda *args, **kwargs: None)
    bound = triton_backend.PREFILL_KERNEL_MIN_QUERY
    q = torch.zeros(bound + 2, 4, 16)

    def step(switches, max_seqlen_q, is_decode_only=False):
        seen.clear()
        meta = SimpleNamespace(is_decode_only=is_decode_only, max_seqlen_q=max_seqlen_q,
                               num_decodes=2, block_tables=torch.zeros(3, 1),
                               seq_lens=torch.zeros(3), cu_seqlens_q=torch.zeros(4),
                               slot_mapping=torch.zeros(64))
        triton_backend.attend(q, q, q, None, None, meta, 1.0, switches)
        return seen[0]

    hopper = KernelSwitches.parse("", (9, 0))
    assert step(hopper, 1, is_decode_only=True) == (True, True)
    assert step(hopper, bound) == (True, True)          # the decode rows of a long prefill
    assert step(hopper, 16) == (True, False)   # a mixed step: the kernel cuts no prefill
    off = KernelSwitches.parse("decode_long_split=off", (9, 0))
    assert step(off, 1, is_decode_only=True) == (False, True)
    assert step(None, 1, is_decode_only=True) == (False, True)


def test_paged_decodes_apart_and_split_reach_the_paged_kernel_of_mixed_steps(monkeypatch):
    seen = []
    monkeypatch.setattr(triton_backend, "_paged_attention", lambda *args, **kwargs: seen.append(
        (kwargs["decodes_apart"], kwargs["decodes_apart_split"])))
    q = torch.zeros(8, 4, 16)
    meta = SimpleNamespace(is_decode_only=False, max_seqlen_q=6, num_decodes=2,
                           block_tables=torch.zeros(3, 1), seq_lens=torch.zeros(3),
                           cu_seqlens_q=torch.zeros(4), slot_mapping=torch.zeros(8))
    for text in ("paged_decodes_apart", "paged_decodes_apart,paged_decodes_split", ""):
        triton_backend.attend(q, q, q, None, None, meta, 1.0, KernelSwitches.parse(text))
    assert seen == [(True, False), (True, True), (False, False)]


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
    with pytest.raises(ConfigError, match="kernel_switches.*needs paged_decodes_apart"):
        KernelSwitches.parse("paged_decodes_split")            # no GPU: apart is off
    with pytest.raises(ConfigError, match="kernel_switches.*needs paged_decodes_apart"):
        KernelSwitches.parse("paged_decodes_apart=off,paged_decodes_split", (9, 0))
    assert KernelSwitches.parse("paged_decodes_split", (9, 0)).paged_decodes_split
    # the config cannot know the device's defaults yet (on Hopper apart is on): it takes
    # the split alone, and the engine's parse for its device decides (s23 call 91 failed
    # here on the H200 when the config refused it)
    assert EngineConfig(kernel_switches="paged_decodes_split").kernel_switches
    with pytest.raises(ConfigError, match="kernel_switches.*needs paged_decodes_apart"):
        KernelSwitches.parse(EngineConfig(kernel_switches="paged_decodes_split")
                             .kernel_switches, device_capability(torch.device("cpu")))
    config = EngineConfig.from_sources(env={"KUBELLM_KERNEL_SWITCHES": "prefill_attention"})
    assert KernelSwitches.parse(config.kernel_switches).prefill_attention


def test_hopper_defaults_to_what_won_on_the_h200_and_the_user_can_turn_them_off():
    """What won on the H200 is on by default from compute capability 9.0; older GPUs and
    the CPU keep every switch off; the user's text applies on top of the defaults."""
    tma = ["rope_kv_write", "prefill_attention", "prefill_attention_tma", "fp8_quant_kernel",
           "mixed_graphs", "decode_long_split", "paged_decodes_apart", "paged_decodes_split"]
    assert hardware_defaults((9, 0)).enabled() == tma
    assert hardware_defaults((10, 0)).enabled() == tma
    assert hardware_defaults((8, 9)).enabled() == []
    assert hardware_defaults(None).enabled() == []
    assert KernelSwitches.parse("", (9, 0)).enabled() == tma
    assert KernelSwitches.parse("prefill_attention_tma=off", (9, 0)).enabled() == \
        ["rope_kv_write", "prefill_attention", "fp8_quant_kernel", "mixed_graphs",
         "decode_long_split", "paged_decodes_apart", "paged_decodes_split"]
    assert KernelSwitches.parse("mixed_graphs=off", (9, 0)).enabled() == tma[:4] + tma[5:]
    assert KernelSwitches.parse("decode_long_split=off", (9, 0)).enabled() == \
        tma[:5] + tma[6:]
    # the split cuts apart's launch: turning apart off turns the default split off with it
    assert KernelSwitches.parse("paged_decodes_apart=off", (9, 0)).enabled() == tma[:6]
    assert KernelSwitches.parse("paged_decodes_split=off", (9, 0)).enabled() == tma[:7]
    assert KernelSwitches.parse("rope_kv_write", (8, 0)).enabled() == ["rope_kv_write"]
    assert device_capability(torch.device("cpu")) is None


def test_the_engine_on_cpu_keeps_every_switch_off(reference):
    path, _, _ = reference
    llm = LLM(path, dtype="float32", max_num_batched_tokens=32, max_model_len=64)
    assert llm.engine.executor.switches.enabled() == []
