"""Mixed-step graphs (the mixed_graphs switch) on CPU: no CUDA graph can be captured here,
so each replay runs the model eagerly on the graph's static, padded buffers - the
padding (tokens past the step with no KV slot, sequences past it with no query) and the
fixed prefill tiles are what a captured graph would see. The tokens must stay
transformers' greedy ones through chunked prefill, prefix caching and decodes joining
prefills, in steps padded to a larger token count."""
from __future__ import annotations

import pytest

from types import SimpleNamespace

import torch

from kubellm.runtime import LLM, SamplingParams
from kubellm.runtime.worker import mixed_graphs
from kubellm.runtime.worker.mixed_graphs import token_sizes
from tests.runtime.engine.test_kernel_switches import MAX_TOKENS, reference  # noqa: F401


def test_token_sizes_step_by_128_up_to_the_budget_or_2048():
    assert token_sizes(8192) == list(range(128, 2049, 128))
    assert token_sizes(300) == [128, 256, 300]
    assert token_sizes(256) == [128, 256]
    assert token_sizes(100) == [100]


@pytest.mark.parametrize("switches", ["", "rope_kv_write,prefill_attention"])
def test_padded_mixed_steps_give_transformers_tokens(reference, switches,  # noqa: F811
                                                     monkeypatch):
    path, prompts, expected = reference
    monkeypatch.setattr(mixed_graphs, "TOKEN_STEP", 16)   # several sizes, most steps padded
    llm = LLM(path, dtype="float32", attention_backend="triton", block_size=8,
              max_num_batched_tokens=32, max_num_seqs=6,
              kernel_switches=",".join(filter(None, [switches, "mixed_graphs"])))
    runner = llm.engine.executor
    assert runner.switches.mixed_graphs and runner.mixed_graphs is None   # CPU: no capture
    graphs = runner.build_mixed_graphs(6, llm.engine.config.max_model_len, 32)
    assert graphs.sizes == [16, 32]
    replays = []
    real_replay = graphs.replay

    def replay(token_ids, positions, meta, *rest):
        replays.append((token_ids.shape[0], meta.max_seqlen_q, meta.num_decodes))
        return real_replay(token_ids, positions, meta, *rest)
    graphs.replay = replay
    runner.mixed_graphs = graphs
    params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
    outs = llm.generate(prompts, params)
    assert [o.outputs[0].token_ids for o in outs] == expected
    assert llm.engine.kv.prefix_hits > 0
    assert replays, "no step took the mixed graphs"
    assert any(n not in graphs.sizes for n, _, _ in replays), "no step was padded"
    assert any(q > 1 and decodes for _, q, decodes in replays), "no decode joined a prefill"


def test_steps_the_graphs_cannot_hold_run_eagerly(tiny_model_factory):
    """Decode-only steps are the decode graphs'; a chunk the prefill kernel serves, more
    tokens or sequences than captured, or a wider block table: eager."""
    llm = LLM(tiny_model_factory("llama3"), dtype="float32", attention_backend="triton",
              block_size=8, max_num_batched_tokens=64, max_num_seqs=4, max_model_len=64,
              kernel_switches="prefill_attention,mixed_graphs")
    graphs = llm.engine.executor.build_mixed_graphs(4, 64, 64)
    assert graphs.max_query == 2047 and graphs.sizes == [64]

    def meta(tokens=40, seqs=3, width=8, max_q=30, decode_only=False):
        return SimpleNamespace(is_decode_only=decode_only, max_seqlen_q=max_q,
                               slot_mapping=torch.zeros(tokens),
                               block_tables=torch.zeros(seqs, width))
    assert graphs.fits(meta())
    assert not graphs.fits(meta(decode_only=True, max_q=1))
    assert not graphs.fits(meta(tokens=65))
    assert not graphs.fits(meta(seqs=5))
    assert not graphs.fits(meta(width=9))
    assert not graphs.fits(meta(max_q=2048))          # the prefill kernel's step
    # without the prefill kernel the paged one serves chunks of any length
    llm.engine.executor.switches.prefill_attention = False
    assert llm.engine.executor.build_mixed_graphs(4, 64, 64).max_query == 64


def test_no_mixed_graphs_when_the_prefill_kernel_serves_every_chunk(tiny_model_factory,
                                                                    monkeypatch):
    """With the prefill kernel's bound at 1 token (the GPU tests' setting) no mixed step
    is the paged kernel's: nothing to capture (call 32: a capture with max_seqlen_q 0
    failed the paged kernel's argument check at startup)."""
    from kubellm.runtime.attention import triton_backend
    monkeypatch.setattr(triton_backend, "PREFILL_KERNEL_MIN_QUERY", 1)
    llm = LLM(tiny_model_factory("llama3"), dtype="float32", attention_backend="triton",
              block_size=8, max_num_batched_tokens=64, max_num_seqs=4, max_model_len=64,
              kernel_switches="prefill_attention,mixed_graphs")
    assert llm.engine.executor.build_mixed_graphs(4, 64, 64) is None
    llm.engine.executor.switches.prefill_attention = False
    assert llm.engine.executor.build_mixed_graphs(4, 64, 64) is not None


def test_a_replay_over_stale_buffers_equals_the_eager_step(tiny_model_factory):
    """The static buffers still hold a larger step's metadata (8 sequences) when a step of
    3 replays, one of them a 100-token chunk spanning two of the paged kernel's tiles:
    the padded sequences must own no tokens, or the kernel's search for a tile's
    sequence lands on one of them and the chunk's second tile is never computed."""
    from kubellm.runtime.attention.metadata import AttentionMetadata
    llm = LLM(tiny_model_factory("llama3"), dtype="float32", attention_backend="triton",
              block_size=8, max_num_batched_tokens=128, max_num_seqs=8, max_model_len=256,
              num_kv_blocks=128, kernel_switches="mixed_graphs")   # 8 x 13 blocks
    runner = llm.engine.executor
    graphs = runner.build_mixed_graphs(8, 256, 128)
    assert graphs.sizes == [128]

    def step(q_lens, seq_lens, first_block):
        tables = torch.zeros(len(q_lens), 13, dtype=torch.int32)
        slots, positions = [], []
        for b, (q, s) in enumerate(zip(q_lens, seq_lens)):
            tables[b] = torch.arange(first_block + 13 * b, first_block + 13 * (b + 1))
            for p in range(s - q, s):
                positions.append(p)
                slots.append(int(tables[b, p // 8]) * 8 + p % 8)
        assert int(tables.max()) < 128   # inside the pool: the interpreter checks nothing
        cu = torch.zeros(len(q_lens) + 1, dtype=torch.int32)
        cu[1:] = torch.tensor(q_lens).cumsum(0)
        meta = AttentionMetadata(
            slot_mapping=torch.tensor(slots), block_tables=tables,
            seq_lens=torch.tensor(seq_lens, dtype=torch.int32), cu_seqlens_q=cu,
            max_seqlen_q=max(q_lens), seq_lens_cpu=list(seq_lens), query_lens_cpu=list(q_lens),
            is_decode_only=False, num_decodes=sum(q == 1 for q in q_lens))
        ids = torch.randint(100, 1000, (len(slots),), generator=torch.Generator().manual_seed(0))
        return ids, torch.tensor(positions), meta

    with torch.inference_mode():
        graphs.replay(*step([1] * 7 + [2], [5] * 7 + [6], 0))     # leaves 8 sequences' cu
        ids, positions, meta = step([1, 1, 100], [11, 21, 100], 0)
        eager, _ = runner.forward_stage(ids, positions, meta)
        replayed, _ = graphs.replay(ids, positions, meta)
    assert replayed.shape == eager.shape == (102, eager.shape[1])
    torch.testing.assert_close(replayed, eager, atol=1e-5, rtol=1e-5)
