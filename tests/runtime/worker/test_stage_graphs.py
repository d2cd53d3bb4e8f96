"""Decode graphs of a pipeline stage, without a GPU: the static buffers a graph reads and
writes (a later stage's hidden/residual inputs, an earlier stage's residual output, rows
padded up to the captured batch size) give what the eager stage gives. A "graph" here
re-runs the captured function eagerly on the static buffers, as a CUDA graph replays
its kernels on them; the real capture runs in the GPU stages (benchmarks/gpu)."""
from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig

from kubellm.runtime.distributed.step_work import StepWork
from kubellm.runtime.loading.loader import load_model
from kubellm.runtime.worker.cuda_graphs import DecodeGraphs
from kubellm.runtime.worker.model_runner import ModelRunner

TABLES = [[0, 1], [2], [3, 4]]
DECODE = StepWork(step=0, request_ids=["a", "b", "c"], token_ids=[[11], [12], [13]],
                  starts=[5, 2, 7], samples=[True] * 3,
                  table_updates=[(True, t) for t in TABLES], table_lens=[2, 1, 2],
                  micro_batches=[(0, 3)], late=[False] * 3)


class EagerReplay:
    def __init__(self, graphs: DecodeGraphs, bs: int, outputs):
        self.graphs, self.bs, self.outputs = graphs, bs, outputs

    def replay(self) -> None:
        for static, fresh in zip(self.outputs, self.graphs._run(self.bs)):
            if static is not None:
                static.copy_(fresh)


def capture_eagerly(graphs: DecodeGraphs) -> None:
    for bs in reversed(graphs.sizes):
        outputs = tuple(t.clone() if t is not None else None for t in graphs._run(bs))
        graphs.graphs[bs], graphs.outputs[bs] = EagerReplay(graphs, bs, outputs), outputs


@pytest.mark.parametrize("layers", [(0, 1), (1, 3), (3, 4)], ids=["first", "middle", "last"])
def test_stage_graph_matches_the_eager_stage(tiny_model_factory, layers):
    model_dir = tiny_model_factory("llama-4layers")
    torch.manual_seed(0)
    model = load_model(model_dir, AutoConfig.from_pretrained(model_dir), torch.float32,
                       torch.device("cpu"), layer_range=layers)
    runner = ModelRunner(model, None, torch.device("cpu"), torch.float32, block_size=4,
                         attention_backend="triton")  # graphs read device metadata only
    runner.allocate_kv_cache(8)
    for layer in runner.attn_layers:  # earlier tokens' KV: the same for both paths
        layer.k_cache.normal_()
        layer.v_cache.normal_()
    out, tables = DECODE.scheduler_output(0, TABLES)
    token_ids, positions, meta = runner.prepare_inputs(out, tables)[:3]
    hidden = residual = None
    if layers[0] > 0:
        hidden, residual = torch.randn(2, 3, model.args.hidden_size)
    eager = runner.forward_stage(token_ids, positions, meta, hidden, residual)

    runner.graphs = DecodeGraphs(model, runner.device, max_num_seqs=4, max_blocks_per_seq=4,
                                 dtype=torch.float32)
    capture_eagerly(runner.graphs)
    assert runner.graphs.fits(meta) and runner.graphs.sizes == [1, 2, 4]  # 3 rows pad to 4
    replayed = runner.forward_stage(token_ids, positions, meta, hidden, residual)
    assert (replayed[1] is None) == (eager[1] is None) == (layers[1] == 4)
    for got, want in zip(replayed, eager):
        if want is not None:
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)  # fp32, same ops
