"""paged_attention against its plain-torch reference (CPU interpreter; GPU with `gpu`)."""
import inspect

import pytest
import torch

from kubellm.kernels.paged_attention import (
    DECODE_CONFIG, LONG_SPLIT_MIN_CHUNK, LONG_SPLITS, PREFILL_CONFIG, TOLERANCES,
    choose_kv_split, choose_num_kv_splits, paged_attention, paged_attention_ref,
)
import kubellm.kernels.paged_attention as pa_module


def make_batch(q_lens, seq_lens, *, num_heads=4, num_kv_heads=2, head_dim=16, block_size=4,
               num_blocks=64, dtype=torch.float32, device="cpu", top_of_pool=False, seed=0):
    """Random queries and a paged cache; each sequence gets distinct random block ids
    (from the top of the pool when `top_of_pool`); only used blocks are filled."""
    gen = torch.Generator().manual_seed(seed)
    blocks_per_seq = [-(-s // block_size) for s in seq_lens]
    max_blocks = max(blocks_per_seq)
    needed = sum(blocks_per_seq)
    candidates = torch.arange(num_blocks - needed if top_of_pool else 0, num_blocks)
    ids = candidates[torch.randperm(len(candidates), generator=gen)[:needed]]
    block_tables = torch.zeros(len(q_lens), max_blocks, dtype=torch.int32)
    start = 0
    for b, n in enumerate(blocks_per_seq):
        block_tables[b, :n] = ids[start:start + n].int()
        start += n
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.empty(shape, dtype=dtype, device=device)
    v_cache = torch.empty(shape, dtype=dtype, device=device)
    used = ids.to(device)
    k_cache[used] = torch.randn((needed,) + shape[1:], generator=gen).to(dtype).to(device)
    v_cache[used] = torch.randn((needed,) + shape[1:], generator=gen).to(dtype).to(device)
    q = torch.randn(sum(q_lens), num_heads, head_dim, generator=gen).to(dtype).to(device)
    cu = torch.zeros(len(q_lens) + 1, dtype=torch.int32)
    cu[1:] = torch.tensor(q_lens).cumsum(0)
    return dict(q=q, k_cache=k_cache, v_cache=v_cache, block_tables=block_tables.to(device),
                seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
                cu_seqlens_q=cu.to(device), max_seqlen_q=max(q_lens),
                scale=head_dim ** -0.5)


def check_against_ref(batch, **kwargs):
    out = paged_attention(**batch, **kwargs)
    ref = paged_attention_ref(**batch)
    atol, rtol = TOLERANCES[batch["q"].dtype]
    torch.testing.assert_close(out, ref, atol=atol, rtol=rtol)
    return out


def nan_filled_buffers(monkeypatch):
    """The launcher's partial-sum buffers start as NaN: a merge or an output that read a
    part nobody wrote would show."""
    real_empty = torch.empty

    def nan_empty(*args, **kwargs):
        t = real_empty(*args, **kwargs)
        return t.fill_(float("nan")) if t.is_floating_point() else t
    monkeypatch.setattr(pa_module.torch, "empty", nan_empty)


def record_launches(monkeypatch) -> list[dict]:
    """Each kernel launch's arguments by name (max_seqlen_q, num_kv_splits, min_kv_chunk,
    decode_only, queries, ...), in order."""
    launches, real = [], pa_module._launch
    signature = inspect.signature(real)

    def recorded(*args, **kwargs):
        launches.append(signature.bind(*args, **kwargs).arguments)
        return real(*args, **kwargs)
    monkeypatch.setattr(pa_module, "_launch", recorded)
    return launches


# prefill from 0 | prefix-cached prefill | decodes | last blocks partially filled; contexts
# long enough that whole unmasked key tiles (16 keys on CPU) come before the masked ones.
MIXED = dict(q_lens=[7, 3, 1, 1, 2, 20], seq_lens=[7, 40, 1, 37, 6, 53])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_mixed_prefill_decode_batch(dtype):
    check_against_ref(make_batch(**MIXED, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decodes_apart_serve_each_row_once_and_match_the_one_launch(dtype, monkeypatch):
    # the decodes (one query token) in a launch of decode tiles, the rest in prefill
    # tiles: every row written once, by the launch that owns its sequence
    batch = make_batch(**MIXED, dtype=dtype)
    apart = check_against_ref(batch, decodes_apart=True)
    if dtype == torch.float32:   # each row's sums in the same order, whatever its tile
        torch.testing.assert_close(apart, paged_attention(**batch), atol=0, rtol=0)
    launches = record_launches(monkeypatch)
    out = torch.full_like(batch["q"], float("nan"))
    paged_attention(**batch, out=out, decodes_apart=True)
    paged_attention(**make_batch(q_lens=[1, 1], seq_lens=[5, 9]), decodes_apart=True)
    assert not out.isnan().any()   # every row written by one launch or the other
    # decode tiles for the sequences of one token, prefill tiles for the rest; a batch
    # of decodes alone is one launch as before
    assert [(a["max_seqlen_q"], a["decode_only"], a["queries"]) for a in launches] == \
        [(1, True, 1), (max(MIXED["q_lens"]), False, 2), (1, False, 0)]


def test_each_launch_of_decodes_apart_leaves_the_other_rows_alone():
    # QUERIES=1 writes the rows of one-token sequences only, QUERIES=2 the others only
    batch = make_batch(**MIXED)
    ref = paged_attention_ref(**batch)
    single = torch.repeat_interleave(torch.tensor(MIXED["q_lens"]) == 1,
                                     torch.tensor(MIXED["q_lens"]))
    args = [batch[k] for k in ("q", "k_cache", "v_cache", "block_tables", "seq_lens",
                               "cu_seqlens_q")]
    for queries, owned, max_q, decode_only in ((1, single, 1, True),
                                               (2, ~single, batch["max_seqlen_q"], False)):
        out = torch.full_like(batch["q"], float("nan"))
        pa_module._launch(*args, max_q, batch["scale"], out, 1, 0, None,
                          decode_only=decode_only, queries=queries)
        assert out[~owned].isnan().all(), queries
        torch.testing.assert_close(out[owned], ref[owned], atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("split", [(4, 32), (3, 0)], ids=["long_split", "few_sequences"])
def test_decodes_apart_split_cuts_long_decodes_beside_prefills(split, monkeypatch):
    # the decode launch cuts its sequences as a decode-only batch would (the split
    # heuristics pick nothing on the CPU: forced here), merging in place with parts kept
    # by sequence -- a step of many prompt tokens and few decodes -- and leaves the
    # merge counts zero; its parts start as NaN, so a part nobody wrote would show
    nan_filled_buffers(monkeypatch)
    monkeypatch.setattr(pa_module, "choose_kv_split", lambda *args: split)
    launches = record_launches(monkeypatch)
    batch = make_batch(q_lens=[1, 40, 1, 1, 30], seq_lens=[150, 40, 70, 5, 90],
                       num_blocks=128)
    out = paged_attention(**batch, decodes_apart=True, decodes_apart_split=True)
    torch.testing.assert_close(out, paged_attention_ref(**batch), atol=2e-5, rtol=2e-5)
    parts = [(a["num_kv_splits"], a["min_kv_chunk"]) for a in launches]
    assert parts == [(split[0], max(split[1], 1)), (1, 0)]
    assert not pa_module.merge_counts(out.device, 1).any()


def test_decodes_apart_refuses_forced_splits_and_configs():
    batch = make_batch(**MIXED)
    with pytest.raises(ValueError, match="decodes_apart"):
        paged_attention(**batch, decodes_apart=True, num_kv_splits=2)
    with pytest.raises(ValueError, match="decodes_apart"):
        paged_attention(**batch, decodes_apart=True, config=(16, 4, 2))


@pytest.mark.parametrize("max_seqlen_q", [1, 64])
def test_max_seqlen_q_only_picks_tiles(max_seqlen_q):
    # Decode-sized tiles over a batch with prefills, and oversized ones: both correct.
    check_against_ref({**make_batch(**MIXED), "max_seqlen_q": max_seqlen_q})


@pytest.mark.parametrize("num_heads,num_kv_heads", [(2, 2), (4, 1), (6, 2)])
def test_gqa_group_sizes(num_heads, num_kv_heads):
    check_against_ref(make_batch(**MIXED, num_heads=num_heads, num_kv_heads=num_kv_heads))


def test_head_dim_64_and_longer_prefill():
    check_against_ref(make_batch(q_lens=[20, 1], seq_lens=[25, 9], head_dim=64, block_size=8))


def test_block_ids_near_top_of_large_pool():
    batch = make_batch(**MIXED, num_blocks=4096, top_of_pool=True)
    assert int(batch["block_tables"].max()) >= 4096 - 12
    check_against_ref(batch)


@pytest.mark.parametrize("num_kv_splits", [2, 3, 8])
def test_split_kv_matches_reference_and_unsplit(num_kv_splits):
    batch = make_batch(q_lens=[1, 1, 1], seq_lens=[70, 5, 33], dtype=torch.float16)
    unsplit = check_against_ref(batch, num_kv_splits=1)
    split = check_against_ref(batch, num_kv_splits=num_kv_splits)
    torch.testing.assert_close(split, unsplit, atol=2e-3, rtol=2e-3)


def test_split_kv_also_handles_prefills():
    check_against_ref(make_batch(**MIXED), num_kv_splits=4)


# decodes of a long-tailed batch: with 4 splits of at least 32 keys, 5 and 20 stay whole
# (one piece: the output written directly), 33 and 40 take 2 pieces, 70 three
# (a 4th split empty), 150 four
LONG_TAILED = dict(q_lens=[1] * 6, seq_lens=[5, 150, 20, 33, 70, 40], num_blocks=96)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_split_with_min_chunk_keeps_short_sequences_whole(dtype):
    batch = make_batch(**LONG_TAILED, dtype=dtype)
    unsplit = check_against_ref(batch, num_kv_splits=1)
    split = check_against_ref(batch, num_kv_splits=4, min_kv_chunk=32)
    torch.testing.assert_close(split, unsplit, **dict(zip(("atol", "rtol"), TOLERANCES[dtype])))


def test_split_parts_of_one_piece_and_empty_splits_are_never_read(monkeypatch):
    """The partial buffers start as NaN: a merge that read a part nobody wrote (an empty
    split's output, a whole sequence's parts under the long split) would give NaN."""
    nan_filled_buffers(monkeypatch)
    batch = make_batch(**LONG_TAILED)
    out = check_against_ref(batch, num_kv_splits=4, min_kv_chunk=32)
    assert not out.isnan().any()
    # the merge kernel: 5 keys in 8 splits is one piece and 7 empty ones
    assert not check_against_ref(batch, num_kv_splits=8).isnan().any()


def test_long_split_last_program_merges_and_leaves_counts_zero(monkeypatch):
    """The long split (a minimum chunk) merges in the last program of each q-block: no
    merge kernel runs, and the counts it used are zero again for the next call."""
    batch = make_batch(**LONG_TAILED)
    launched = []
    real = pa_module.kernel_for

    def recording(kernel, *args, **kwargs):
        launched.append(getattr(kernel, "__name__", str(kernel)))
        return real(kernel, *args, **kwargs)
    monkeypatch.setattr(pa_module, "kernel_for", recording)
    first = check_against_ref(batch, num_kv_splits=4, min_kv_chunk=32)
    second = check_against_ref(batch, num_kv_splits=4, min_kv_chunk=32)
    torch.testing.assert_close(first, second, atol=0, rtol=0)
    assert not any("merge" in name for name in launched), launched
    assert not pa_module._MERGE_COUNTS[torch.device("cpu")].any()
    with pytest.raises(ValueError, match="more than its"):
        pa_module.merge_counts(torch.device("cpu"), pa_module.MERGE_COUNTS + 1)


def test_bad_min_kv_chunk_is_named():
    with pytest.raises(ValueError, match="min_kv_chunk must be an int >= 0"):
        paged_attention(**make_batch(**LONG_TAILED), num_kv_splits=2, min_kv_chunk=-1)


@pytest.mark.parametrize("num_kv_splits,min_kv_chunk", [(1, 0), (4, 32), (3, 0)])
def test_decode_only_programs_find_their_sequence_without_search(num_kv_splits, min_kv_chunk):
    # the last sequence has no query this step (q_len 0), as a graph's padding may not
    batch = make_batch(q_lens=[1] * 6 + [0], seq_lens=[5, 150, 20, 33, 70, 40, 9],
                       num_blocks=100)
    out = torch.full_like(batch["q"], 7.0)
    searched = check_against_ref(batch, num_kv_splits=num_kv_splits, min_kv_chunk=min_kv_chunk)
    direct = check_against_ref(batch, out=out, num_kv_splits=num_kv_splits,
                               min_kv_chunk=min_kv_chunk, decode_only=True)
    torch.testing.assert_close(direct, searched, atol=0, rtol=0)
    with pytest.raises(ValueError, match="decode_only needs max_seqlen_q 1, got 2"):
        paged_attention(**{**batch, "max_seqlen_q": 2}, decode_only=True)


@pytest.mark.parametrize("config", [(32, 4, 2), (64, 4, 2)])
def test_tile_config_replaces_the_tuned_one(config):
    batch = make_batch(**LONG_TAILED)
    check_against_ref(batch, config=config)
    check_against_ref(batch, num_kv_splits=4, min_kv_chunk=32, decode_only=True,
                      config=config)


@pytest.mark.parametrize("config", [(48, 4, 2), (8, 4, 2), (64, 0, 2), (64, 4), [64, 4, 2]])
def test_bad_tile_config_is_named(config):
    with pytest.raises(ValueError, match="config must be .BLOCK_N, num_warps, num_stages."):
        paged_attention(**make_batch(**LONG_TAILED), config=config)


class _RecordingLaunch:
    """Stands in for the compiled kernel: records what the launcher passes."""
    def __init__(self, tuned):
        self.tuned, self.kwargs = tuned, None

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.kwargs = kwargs
        return launch


def test_calls_launch_with_the_fixed_configs(monkeypatch):
    # the launcher's choice as compiled for CUDA (on CPU the interpreter fixes BLOCK_N):
    # decode tiles get DECODE_CONFIG, prefill tiles PREFILL_CONFIG, never the autotuner --
    # unless a benchmark sets them to None
    launches = []

    def kernel_for(kernel, device, tuned=None):
        launches.append(_RecordingLaunch(tuned))
        return launches[-1]
    monkeypatch.setattr(pa_module, "is_interpreted", lambda kernel: False)
    monkeypatch.setattr(pa_module, "kernel_for", kernel_for)
    decode = make_batch(q_lens=[1] * 3, seq_lens=[5, 40, 9])
    paged_attention(**decode, decode_only=True)
    paged_attention(**decode, num_kv_splits=4, min_kv_chunk=8, decode_only=True)
    paged_attention(**decode)
    paged_attention(**make_batch(**MIXED))
    tiles = [(launch.kwargs["BLOCK_N"], launch.kwargs["num_warps"],
              launch.kwargs["num_stages"]) for launch in launches]
    assert tiles == [DECODE_CONFIG] * 3 + [PREFILL_CONFIG]
    assert all(launch.tuned is None for launch in launches)
    monkeypatch.setattr(pa_module, "PREFILL_CONFIG", None)
    paged_attention(**make_batch(**MIXED))
    assert launches[-1].tuned is pa_module._paged_attention_kernel_tuned
    assert "BLOCK_N" not in launches[-1].kwargs


def test_strided_q_out_buffer_and_padding_rows_left_alone():
    batch = make_batch(q_lens=[3, 0, 1], seq_lens=[5, 0, 8])
    wide = torch.randn(batch["q"].shape[0], 3 * 4, 16)  # like a fused qkv projection
    wide[:, :4] = batch["q"]
    batch["q"] = wide[:, :4]
    out = torch.full((batch["q"].shape[0] + 2, 4, 16), 7.0)  # 2 padding tokens at the end
    check_against_ref(batch, out=out[:4])
    paged_attention(**batch, out=out[:4])
    assert torch.all(out[4:] == 7.0)


def test_bad_inputs_are_named():
    batch = make_batch(**MIXED)
    with pytest.raises(TypeError, match="block_tables"):
        paged_attention(**{**batch, "block_tables": batch["block_tables"].long()})
    with pytest.raises(ValueError, match="multiple of KV heads"):
        paged_attention(**{**batch, "q": batch["q"][:, :3]})
    with pytest.raises(TypeError, match="k_cache"):
        paged_attention(**{**batch, "k_cache": batch["k_cache"].half()})
    with pytest.raises(ValueError, match="cu_seqlens_q"):
        paged_attention(**{**batch, "cu_seqlens_q": batch["cu_seqlens_q"][:-1]})
    with pytest.raises(ValueError, match="max_seqlen_q"):
        paged_attention(**{**batch, "max_seqlen_q": 0})
    with pytest.raises(ValueError, match="max_seqlen_q"):  # would need a device sync
        paged_attention(**{**batch, "max_seqlen_q": torch.tensor(20)})
    with pytest.raises(ValueError, match="contiguous"):
        paged_attention(**{**batch, "v_cache": batch["v_cache"].transpose(0, 1)})
    odd = make_batch(**MIXED, head_dim=24)
    with pytest.raises(ValueError, match="power of two"):
        paged_attention(**odd)


def test_split_heuristic_only_for_small_decode_batches(monkeypatch):
    monkeypatch.setattr(pa_module, "_sm_count", lambda device: 132)
    gpu = torch.device("cuda")
    assert choose_num_kv_splits(1, 8, 1, gpu) == 32     # 8 programs for 132 SMs
    assert choose_num_kv_splits(4, 8, 1, gpu) == 8
    assert choose_num_kv_splits(16, 8, 1, gpu) == 2
    assert choose_num_kv_splits(32, 8, 1, gpu) == 1     # 256 programs: about 2 per SM
    assert choose_num_kv_splits(256, 8, 1, gpu) == 1
    assert choose_num_kv_splits(0, 8, 1, gpu) == 32     # empty batch: no division by zero
    assert choose_num_kv_splits(1, 8, 16, gpu) == 1     # prefill: never split
    assert choose_num_kv_splits(1, 8, 1, torch.device("cpu")) == 1


def test_long_split_only_where_split_kv_does_not_already_split(monkeypatch):
    monkeypatch.setattr(pa_module, "_sm_count", lambda device: 132)
    gpu = torch.device("cuda")
    long = (LONG_SPLITS, LONG_SPLIT_MIN_CHUNK)
    assert choose_kv_split(256, 8, 1, gpu) == (1, 0)                  # off unless asked
    assert choose_kv_split(256, 8, 1, gpu, long_split=True) == long
    assert choose_kv_split(32, 8, 1, gpu, long_split=True) == long
    assert choose_kv_split(16, 8, 1, gpu, long_split=True) == (2, 0)  # split-KV's own cut
    assert choose_kv_split(256, 8, 16, gpu, long_split=True) == (1, 0)   # prefills
    assert choose_kv_split(256, 8, 1, torch.device("cpu"), long_split=True) == (1, 0)


# --- GPU: Llama-3-8B attention shape (32 heads, 8 KV heads, D=128, block 16) ---

LLAMA3 = dict(num_heads=32, num_kv_heads=8, head_dim=128, block_size=16)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gpu_mixed_batch_llama3_shape(cuda, dtype):
    batch = make_batch(q_lens=[300, 77, 1, 1, 1, 1, 513], seq_lens=[300, 1100, 17, 4096, 2000, 1, 700],
                       num_blocks=2048, dtype=dtype, device=cuda, **LLAMA3)
    check_against_ref(batch)


@pytest.mark.gpu
@pytest.mark.parametrize("split", [False, True], ids=["whole", "split"])
def test_gpu_mixed_batch_decodes_apart_llama3_shape(cuda, split):
    # 20 decodes of 512-3,932 keys beside a 300-token prompt and a prefix-cached chunk, as
    # a serving step where a prompt joins running decodes, in a CUDA graph too; with the
    # split, the decodes over 1,024 keys are cut (the long split: 22 sequences)
    q_lens = [1] * 20 + [300, 77]
    seq_lens = [512 + 180 * i for i in range(20)] + [300, 1100]
    batch = make_batch(q_lens=q_lens, seq_lens=seq_lens, num_blocks=4096,
                       dtype=torch.bfloat16, device=cuda, **LLAMA3)
    kwargs = dict(decodes_apart=True, decodes_apart_split=split, long_split=True)
    assert choose_kv_split(len(q_lens), 8, 1, cuda, long_split=True) == \
        (LONG_SPLITS, LONG_SPLIT_MIN_CHUNK)
    eager = check_against_ref(batch, **kwargs)
    out = torch.empty_like(batch["q"])
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        paged_attention(**batch, out=out, **kwargs)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, eager, atol=0, rtol=0)


@pytest.mark.gpu
def test_gpu_pool_offsets_beyond_int32(cuda):
    # 140,000 blocks x 16 x 8 x 128 elements: element offsets of the top blocks pass 2^31.
    batch = make_batch(q_lens=[40, 1, 1], seq_lens=[90, 500, 33], num_blocks=140_000,
                       top_of_pool=True, dtype=torch.bfloat16, device=cuda, **LLAMA3)
    assert int(batch["block_tables"].max()) * batch["k_cache"].stride(0) > 2 ** 31
    check_against_ref(batch)


@pytest.mark.gpu
@pytest.mark.parametrize("head_dim", [64, 128])
def test_gpu_long_decode_split_vs_unsplit(cuda, head_dim):
    shape = {**LLAMA3, "head_dim": head_dim}
    batch = make_batch(q_lens=[1, 1], seq_lens=[16384, 3000], num_blocks=1400,
                       dtype=torch.bfloat16, device=cuda, **shape)
    assert choose_num_kv_splits(2, 8, 1, cuda) > 1
    split = check_against_ref(batch)  # heuristic picks split-KV here
    unsplit = check_against_ref(batch, num_kv_splits=1)
    torch.testing.assert_close(split, unsplit, atol=2e-2, rtol=2e-2)


@pytest.mark.gpu
def test_gpu_long_tailed_decode_batch_long_split(cuda):
    """A decode batch as long-tailed chat traffic leaves it: most sequences short, a few
    of thousands of keys; the long split against the reference and the unsplit kernel."""
    gen = torch.Generator().manual_seed(3)
    lens = (torch.randn(200, generator=gen) + 5.5).exp().clamp(16, 4000).int().tolist()
    batch = make_batch(q_lens=[1] * len(lens), seq_lens=lens,
                       num_blocks=sum(-(-n // 16) for n in lens) + 8, dtype=torch.bfloat16,
                       device=cuda, **LLAMA3)
    assert choose_kv_split(len(lens), 8, 1, cuda, long_split=True)[0] > 1
    split = check_against_ref(batch, long_split=True, decode_only=True)
    unsplit = check_against_ref(batch, num_kv_splits=1, config=DECODE_CONFIG)
    torch.testing.assert_close(split, unsplit, atol=2e-2, rtol=2e-2)
    # decode-only calls launch with DECODE_CONFIG; the searching kernel at the same tile
    # computes the same bits
    torch.testing.assert_close(check_against_ref(batch, num_kv_splits=1, decode_only=True),
                               unsplit, atol=0, rtol=0)


@pytest.mark.gpu
def test_gpu_decode_calls_do_not_depend_on_earlier_tuning(cuda):
    """Decode-only calls launch with DECODE_CONFIG whatever the autotuner chose earlier:
    a long-split batch of 513-key sequences (one piece each) gives the unsplit kernel's
    bits, after a one-sequence split-KV call and a one-key warm-up batch (the engine's
    graph warm-ups) ran first."""
    few = make_batch(q_lens=[1], seq_lens=[4000], num_blocks=300, dtype=torch.bfloat16,
                     device=cuda, **LLAMA3)
    paged_attention(**few)
    warmup = make_batch(q_lens=[1] * 64, seq_lens=[1] * 64, num_blocks=80,
                        dtype=torch.bfloat16, device=cuda, **LLAMA3)
    paged_attention(**warmup, long_split=True, decode_only=True)
    batch = make_batch(q_lens=[1] * 64, seq_lens=[513] * 64, num_blocks=64 * 33 + 8,
                       dtype=torch.bfloat16, device=cuda, **LLAMA3)
    assert choose_kv_split(64, 8, 1, cuda, long_split=True)[0] > 1
    torch.testing.assert_close(paged_attention(**batch, long_split=True, decode_only=True),
                               paged_attention(**batch, num_kv_splits=1, decode_only=True),
                               atol=0, rtol=0)
