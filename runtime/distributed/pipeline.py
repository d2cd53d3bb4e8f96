"""One rank's share of a step: its pipeline stage over every micro-batch, in order.

A stage receives a micro-batch's (hidden, residual) from the previous stage, runs its
layers (TP ranks all-reduce inside them) and sends the result on without waiting, so it
starts micro-batch m+1 while the next stage still works on m. The last stage turns the
sampling rows into logits; its TP rank 0 sends them to the driver, which samples.
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist

from kubellm.runtime.attention.metadata import set_metadata
from kubellm.runtime.distributed.layout import RankLayout
from kubellm.runtime.distributed.step_work import BlockTableMirror, StepWork
from kubellm.runtime.distributed.trace import StageTrace


class PipelineStage:
    def __init__(self, runner, layout: RankLayout, trace: StageTrace | None = None):
        self.runner = runner
        self.model = runner.model
        self.layout = layout
        self.trace = trace
        self.hidden_size = runner.model.args.hidden_size
        self.tables = BlockTableMirror()  # every StepWork must pass through run(), in order

    @torch.inference_mode()
    def run(self, work: StepWork) -> list[torch.Tensor]:
        """Runs every micro-batch; returns the float32 logits of each micro-batch's
        sampling rows when this rank is on the last stage (else [])."""
        layout, runner = self.layout, self.runner
        block_tables = self.tables.rebuild(work)
        in_flight = []  # (work handle, tensor): a send's buffer must outlive the send
        logits = []
        for m in range(len(work.micro_batches)):
            out, tables = work.scheduler_output(m, block_tables)
            token_ids, positions, meta, rows = runner.prepare_inputs(out, tables)[:4]
            hidden = residual = None
            if not layout.is_first_stage:
                received = torch.empty(2, work.num_tokens(m), self.hidden_size,
                                       dtype=runner.dtype, device=runner.device)
                dist.recv(received, src=layout.prev_stage_rank)
                hidden, residual = received[0], received[1]
            began = time.time()
            set_metadata(meta)
            try:
                hidden, residual = self.model(token_ids, positions, hidden, residual)
            finally:
                set_metadata(None)
            if not layout.is_last_stage:
                sent = torch.stack([hidden, residual])
                in_flight.append((dist.isend(sent, dst=layout.next_stage_rank), sent))
            elif work.num_samples(m):
                part = self.model.compute_logits(hidden[rows]).float()
                if layout.is_driver:
                    logits.append(part)
                elif layout.tp_rank == 0:
                    in_flight.append((dist.isend(part, dst=0), part))
            if self.trace is not None:
                self.trace.record(work.step, m, began, time.time())
        for handle, _ in in_flight:
            handle.wait()
        return logits

    def receive_logits(self, work: StepWork, vocab_size: int) -> list[torch.Tensor]:
        """Driver side of a multi-stage pipeline: the last stage's logits, in order."""
        parts = []
        for m in range(len(work.micro_batches)):
            if work.num_samples(m):
                part = torch.empty(work.num_samples(m), vocab_size, dtype=torch.float32,
                                   device=self.runner.device)
                dist.recv(part, src=self.layout.last_stage_leader)
                parts.append(part)
        return parts
