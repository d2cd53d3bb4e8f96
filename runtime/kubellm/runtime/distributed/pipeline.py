"""One rank's share of a step: its pipeline stage over every micro-batch, in order.

A stage receives a micro-batch's (hidden, residual) from the previous stage, runs its
layers (TP ranks all-reduce inside them) and sends the result on without waiting, so it
starts micro-batch m+1 while the next stage still works on m. The last stage turns the
sampling rows into logits; once the step's micro-batches are through, its TP rank 0
sends them to the driver in one message, and the driver samples.

A stage's forward replays the runner's CUDA graph for decode micro-batches (captured per
batch size on every rank, TP collectives inside); the sends and receives between stages
stay outside the graphs. Late tokens (async scheduling: a decode's input still being
sampled on the driver's device) reach the first stage's other TP ranks by a broadcast
in their TP group, on the device, so no rank waits for the host.
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist

from kubellm.runtime.parallel import comm_timing
from kubellm.runtime.distributed.layout import RankLayout
from kubellm.runtime.distributed.step_work import BlockTableMirror, StepWork
from kubellm.runtime.distributed.trace import StageTrace
from kubellm.runtime.worker.sampled_batch import to_device


class PipelineStage:
    def __init__(self, runner, layout: RankLayout, tp_group=None,
                 trace: StageTrace | None = None):
        self.runner = runner
        self.model = runner.model
        self.layout = layout
        self.tp_group = tp_group
        self.trace = trace
        self.hidden_size = runner.model.args.hidden_size
        self.tables = BlockTableMirror()  # every StepWork must pass through run(), in order

    @torch.inference_mode()
    def run(self, work: StepWork, late_tokens: torch.Tensor | None = None
            ) -> list[torch.Tensor]:
        """Runs every micro-batch; returns the float32 logits of each micro-batch's
        sampling rows when this rank is on the last stage (else []). ``late_tokens``:
        the driver's device tensor of the step's late tokens, in ``work.late`` order."""
        layout, runner = self.layout, self.runner
        block_tables = self.tables.rebuild(work)
        comm_timing.begin_step(work.step)
        if layout.is_first_stage and any(work.late):
            late_tokens = self._share_late_tokens(work, late_tokens)
        in_flight = []  # (work handle, tensor): a send's buffer must outlive the send
        logits = []
        for m in range(len(work.micro_batches)):
            out, tables = work.scheduler_output(m, block_tables)
            start = time.perf_counter()
            token_ids, positions, meta, rows = runner.prepare_inputs(out, tables)[:4]
            runner.host_time_s += time.perf_counter() - start
            if layout.is_first_stage and late_tokens is not None:
                _fill_late(token_ids, late_tokens, *work.late_rows(m))
            hidden = residual = None
            if not layout.is_first_stage:
                received = torch.empty(2, work.num_tokens(m), self.hidden_size,
                                       dtype=runner.dtype, device=runner.device)
                with comm_timing.span("send_recv"):
                    dist.recv(received, src=layout.prev_stage_rank)
                hidden, residual = received[0], received[1]
            began = time.time()
            hidden, residual = runner.forward_stage(token_ids, positions, meta, hidden,
                                                    residual)
            if not layout.is_last_stage:
                sent = torch.stack([hidden, residual])
                in_flight.append((dist.isend(sent, dst=layout.next_stage_rank), sent))
            elif work.num_samples(m):  # every TP rank: compute_logits all-gathers
                logits.append(self.model.compute_logits(hidden[rows]).float())
            if self.trace is not None:
                self.trace.record(work.step, m, began, time.time())
        if logits and layout.is_last_stage and not layout.is_driver and layout.tp_rank == 0:
            # After the last receive, not per micro-batch: with NCCL both directions
            # between this rank and the driver share one stream, and a logits send
            # queued before the driver's next activations would wait for each other.
            sent = torch.cat(logits)
            in_flight.append((dist.isend(sent, dst=0), sent))
        if in_flight:
            with comm_timing.span("send_recv"):  # what the sends still owe at step end
                for handle, _ in in_flight:
                    handle.wait()
        return logits if layout.is_driver else []

    def _share_late_tokens(self, work: StepWork, late_tokens: torch.Tensor | None
                           ) -> torch.Tensor:
        """The driver's late tokens on every TP rank of the first stage."""
        if self.layout.tp_size == 1:
            return late_tokens
        if late_tokens is None:  # not the driver: receive them
            late_tokens = torch.empty(sum(work.late), dtype=torch.int64,
                                      device=self.runner.device)
        dist.broadcast(late_tokens, src=0, group=self.tp_group)
        return late_tokens

    def close(self) -> None:
        if self.trace is not None:
            self.trace.close()

    def receive_logits(self, work: StepWork, vocab_size: int) -> list[torch.Tensor]:
        """Driver side of a multi-stage pipeline: the last stage's logits of the
        sampling rows, in order, in one message."""
        num_rows = sum(work.samples)
        if not num_rows:
            return []
        logits = torch.empty(num_rows, vocab_size, dtype=torch.float32,
                             device=self.runner.device)
        with comm_timing.span("send_recv"):
            dist.recv(logits, src=self.layout.last_stage_leader)
        return [logits]


def _fill_late(token_ids: torch.Tensor, late_tokens: torch.Tensor, rows: list[int],
               index: list[int]) -> None:
    if rows:
        device = token_ids.device
        token_ids.index_copy_(0, to_device(rows, torch.int64, device),
                              late_tokens.index_select(0, to_device(index, torch.int64,
                                                                    device)))
