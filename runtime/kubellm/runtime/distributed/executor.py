"""The driver's executor: the engine's model runner when the model spans processes.

``execute(out, tables)`` sends the step's work to every rank over the control group,
runs the driver's own stage (stage 0, TP rank 0), collects the last stage's logits of
the sampling rows and samples them here with the engine's Sampler — so sampling,
seeded generators included, is exactly the single-process code path.

Any failure inside a step is fatal to the whole group: ranks may be stuck mid-collective
with no way back to a consistent state, so the driver stops every worker and exits
non-zero (the watchdog does the same when a worker process dies).
"""
from __future__ import annotations

import atexit
import logging
import threading
import time

import torch
import torch.distributed as dist

from kubellm.runtime.parallel import state as ps
from kubellm.runtime.distributed.launcher import WorkerSupervisor
from kubellm.runtime.distributed.pipeline import PipelineStage
from kubellm.runtime.distributed.stage import describe_rank
from kubellm.runtime.distributed.step_work import BlockTableDiffs, StepWork

log = logging.getLogger(__name__)

# control messages besides StepWork
HEARTBEAT, DESCRIBE, SHUTDOWN = "heartbeat", "describe", "shutdown"
SHUTDOWN_WAIT_S = 30.0


class DistributedExecutor:
    def __init__(self, stage: PipelineStage, sampler, supervisor: WorkerSupervisor,
                 timeout_s: float):
        self.stage = stage
        self.runner = stage.runner
        self.sampler = sampler
        self.supervisor = supervisor
        self.layout = stage.layout
        self.vocab_size = self.runner.vocab_size
        self.device = self.runner.device
        self.dtype = self.runner.dtype
        self._lock = threading.Lock()  # one control message at a time, steps included
        self._num_steps = 0
        self._table_diffs = BlockTableDiffs()
        self._last_sent = time.monotonic()
        self._closed = False
        self._is_mid_step = False
        # Idle workers wait in a collective that would time out: keep them fed.
        self._heartbeat_s = max(1.0, timeout_s / 4)
        threading.Thread(target=self._heartbeat, name="kubellm-dist-heartbeat",
                         daemon=True).start()
        atexit.register(self.shutdown)

    # ---- the engine's executor interface ---------------------------------------------
    def execute(self, out, block_tables):
        work = StepWork.from_schedule(self._num_steps, out, block_tables, self.layout.pp_size,
                                      self._table_diffs)
        self._num_steps += 1
        with self._lock:
            self._is_mid_step = True  # stays set if an interrupt leaves the step half done
            try:
                self._send(work)
                logits = self.stage.run(work)
                if self.layout.pp_size > 1:
                    logits = self.stage.receive_logits(work, self.vocab_size)
                self._is_mid_step = False
            except Exception as exc:
                log.exception("distributed step %d failed", work.step)
                self.supervisor.abort_after_error(f"step {work.step} failed on the driver: "
                                                  f"{type(exc).__name__}: {exc}")
        requests = [s.request for s in out.scheduled if s.samples]
        if not requests:
            return {}, {}, {}
        result = self.sampler.sample(torch.cat(logits), [r.sampling_state for r in requests],
                                     constrained=out.has_special).result()
        ids = {r.request_id: t for r, t in zip(requests, result.token_ids)}
        logprobs = {r.request_id: lp for r, lp in zip(requests, result.logprobs)}
        # prompt logprobs need every prompt row's logits, which stay on the last stage;
        # the engine refuses them up front when the model spans processes
        return ids, logprobs, {}

    # ---- control ---------------------------------------------------------------------
    def describe_ranks(self) -> list[dict]:
        """What every rank holds (see stage.describe_rank), by rank."""
        with self._lock:
            self._send(DESCRIBE)
            gathered = [None] * self.layout.world_size
            dist.gather_object(describe_rank(self.runner, self.layout), gathered, dst=0,
                               group=ps.state().control_group)
        return gathered

    @property
    def num_steps(self) -> int:
        """Steps executed so far: the StepWork.step the next one will carry."""
        return self._num_steps

    def shutdown(self) -> None:
        """Tell the workers to exit, wait for them, leave the process group."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.shutdown)
        # at interpreter exit a daemon engine thread may still be inside a step
        if not self._lock.acquire(timeout=SHUTDOWN_WAIT_S):
            log.warning("a step is still running after %.0f s: killing the workers",
                        SHUTDOWN_WAIT_S)
            self.supervisor.stop(grace_s=0.0)
            return
        try:
            if self._is_mid_step:  # workers wait inside that step and would never hear us
                self.supervisor.stop(grace_s=0.0)
            else:
                try:
                    self._send(SHUTDOWN)
                except Exception:  # a worker already gone: stop() kills the rest
                    log.warning("could not send shutdown to the workers", exc_info=True)
                self.supervisor.stop()
            ps.destroy()
        finally:
            self._lock.release()

    def _send(self, message) -> None:
        box = [message]
        dist.broadcast_object_list(box, src=0, group=ps.state().control_group)
        self._last_sent = time.monotonic()

    def _heartbeat(self) -> None:
        while not self._closed:
            time.sleep(self._heartbeat_s / 4)
            if time.monotonic() - self._last_sent < self._heartbeat_s:
                continue
            if not self._lock.acquire(blocking=False):
                continue  # a step is running: that is traffic enough
            try:
                if not self._closed:
                    self._send(HEARTBEAT)
            except Exception as exc:
                self.supervisor.abort_after_error(f"lost the workers: {type(exc).__name__}: "
                                                  f"{exc}")
            finally:
                self._lock.release()
