"""The decode-graph plan that can be checked without a GPU: which batch sizes are
captured and which steps fit."""
import torch

from kubellm.runtime.attention.metadata import AttentionMetadata
from kubellm.runtime.worker.cuda_graphs import DecodeGraphs, capture_sizes


def test_capture_sizes_cover_every_batch_up_to_the_limit():
    assert capture_sizes(256)[:5] == [1, 2, 4, 8, 16]
    assert capture_sizes(256)[-1] == 256 and all(b % 16 == 0 for b in capture_sizes(256)[4:])
    assert capture_sizes(6) == [1, 2, 4, 6]
    for limit in (1, 6, 100, 256):
        sizes = capture_sizes(limit)
        assert sizes == sorted(set(sizes)) and sizes[-1] == limit
        assert all(any(s >= n for s in sizes) for n in range(1, limit + 1))


def test_fits_only_steps_within_the_captured_shapes():
    graphs = DecodeGraphs(torch.nn.Identity(), torch.device("cpu"), 8, max_blocks_per_seq=4)

    def meta(num_seqs, width):
        return AttentionMetadata(
            slot_mapping=torch.zeros(num_seqs, dtype=torch.int64),
            block_tables=torch.zeros(num_seqs, width, dtype=torch.int32),
            seq_lens=torch.ones(num_seqs, dtype=torch.int32),
            cu_seqlens_q=torch.arange(num_seqs + 1, dtype=torch.int32), max_seqlen_q=1,
            seq_lens_cpu=[1] * num_seqs, query_lens_cpu=[1] * num_seqs, is_decode_only=True)
    assert graphs.fits(meta(8, 4))
    assert not graphs.fits(meta(9, 4))      # more sequences than the largest graph
    assert not graphs.fits(meta(3, 5))      # a block table wider than the static buffer

