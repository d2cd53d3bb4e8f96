"""The driver's executor: the engine's model runner when the model spans processes.

``launch(out, tables, ahead_of)`` sends the step's work to every rank over the control
group, runs the driver's own stage (stage 0, TP rank 0), collects the last stage's
logits of the sampling rows and starts sampling them here with the engine's Sampler —
so sampling, seeded generators included, is exactly the single-process code path. On
CUDA nothing in it waits for the device, so the engine plans step N+1 while the ranks
run step N (async scheduling); ``execute`` is launch-and-wait.

A failure is the engine's, never the process's: a worker that exits (the supervisor's
watchdog), a rank that misses a heartbeat (heartbeat.py) or a collective that fails
mid-step marks the engine dead (``dead_error``, an EngineDeadError naming the rank),
stops this node's workers and calls the engine's dead callbacks; every later launch
raises that error. ``shutdown`` ends the workers, leaves the process groups and frees
the driver's weights, KV cache and CUDA graphs, so that another engine can start here.
"""
from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from itertools import compress

import torch
import torch.distributed as dist

from kubellm.runtime.core.errors import EngineDeadError
from kubellm.runtime.distributed.heartbeat import Heartbeat
from kubellm.runtime.distributed.launcher import WorkerSupervisor
from kubellm.runtime.distributed.pipeline import PipelineStage
from kubellm.runtime.distributed.stage import describe_rank
from kubellm.runtime.distributed.step_work import BlockTableDiffs, StepWork
from kubellm.runtime.parallel import state as ps
from kubellm.runtime.worker.model_runner import StepHandle
from kubellm.runtime.worker.sampled_batch import to_device

log = logging.getLogger(__name__)

# control messages besides StepWork
KEEPALIVE, DESCRIBE, SHUTDOWN = "keepalive", "describe", "shutdown"
SHUTDOWN_WAIT_S = 30.0  # for a step still running on another thread at shutdown


class DistributedExecutor:
    needs_shutdown_at_exit = True  # workers to stop, process groups to leave

    def __init__(self, stage: PipelineStage, sampler, supervisor: WorkerSupervisor,
                 parallel: ps.ParallelState, timeout_s: float, heartbeat_timeout_s: float):
        self.stage = stage
        self.runner = stage.runner
        self.sampler = sampler
        self.supervisor = supervisor
        self.parallel = parallel
        self.layout = stage.layout
        self.vocab_size = self.runner.vocab_size
        self.device = self.runner.device
        self.dtype = self.runner.dtype
        self.dead_error: EngineDeadError | None = None
        self._dead_callbacks: list[Callable[[EngineDeadError], None]] = []
        self._fail_lock = threading.Lock()
        self._lock = threading.Lock()  # one control message at a time, steps included
        self._num_steps = 0
        self._table_diffs = BlockTableDiffs()
        self._last_sent = time.monotonic()
        self._closed = False
        self._closing = threading.Event()  # wakes the keep-alive thread at shutdown
        self._is_mid_step = False
        # Idle workers wait for the next message in a collective that would time out.
        self._keepalive_s = max(1.0, timeout_s / 4)
        self._heartbeat_timeout_s = heartbeat_timeout_s
        self.heartbeat = Heartbeat(parallel.heartbeat_group, heartbeat_timeout_s,
                                   self._on_heartbeat_lost)

    def start(self) -> None:
        """Every rank is built: failures are this engine's from now on; start the liveness
        checks (not before: loading is slow)."""
        self.supervisor.on_failure = self._fail
        if self.supervisor.failure is not None:  # a worker died since the build's checks
            self._fail(self.supervisor.failure)
            return
        self.heartbeat.start()
        threading.Thread(target=self._keep_alive, name="kubellm-dist-keepalive",
                         daemon=True).start()

    # ---- the engine's executor interface ---------------------------------------------
    @torch.inference_mode()
    def launch(self, out, block_tables, ahead_of: StepHandle | None = None) -> StepHandle:
        work = StepWork.from_schedule(self._num_steps, out, block_tables, self.layout.pp_size,
                                      self._table_diffs)
        late_tokens = None
        if any(work.late):  # inputs still being sampled by the step before, on the device
            rows = [ahead_of.row_of[r] for r, late in zip(work.request_ids, work.late) if late]
            late_tokens = ahead_of.batch.token_ids[to_device(rows, torch.int64, self.device)]
        with self._lock:
            self._check_alive()
            self._num_steps += 1
            self._is_mid_step = True  # stays set if an interrupt leaves the step half done
            try:
                self._send(work)
                logits = self.stage.run(work, late_tokens)
                if self.layout.pp_size > 1:
                    logits = self.stage.receive_logits(work, self.vocab_size)
                self._is_mid_step = False
            except Exception as exc:
                log.exception("distributed step %d failed", work.step)
                raise self._fail(self.supervisor.explain(
                    f"step {work.step} failed on the driver: {type(exc).__name__}: {exc}")
                ) from exc
        requests = list(compress(out.requests, out.samples))
        if not requests:
            return StepHandle([], None)
        # prompt logprobs need every prompt row's logits, which stay on the last stage;
        # the engine refuses them up front when the model spans processes
        return StepHandle(requests, self.sampler.sample(
            torch.cat(logits), [r.sampling_state for r in requests],
            constrained=out.has_special))

    def execute(self, out, block_tables):
        return self.launch(out, block_tables).result()

    @property
    def host_time_s(self) -> float:
        return self.runner.host_time_s

    @host_time_s.setter
    def host_time_s(self, value: float) -> None:
        self.runner.host_time_s = value

    # ---- failure -----------------------------------------------------------------------
    def add_dead_callback(self, callback: Callable[[EngineDeadError], None]) -> None:
        """``callback(error)`` runs once, on the thread that noticed, when the engine dies
        (at once if it is dead already)."""
        self._dead_callbacks.append(callback)
        if self.dead_error is not None:
            callback(self.dead_error)

    def remove_dead_callback(self, callback) -> None:
        if callback in self._dead_callbacks:
            self._dead_callbacks.remove(callback)

    def _on_heartbeat_lost(self, why: str) -> None:
        # A killed worker breaks the heartbeat's collective at once, often before the
        # watchdog's next look at the process table: name the rank that died, as a failed
        # step does (a hung rank or another node's is not in that table: then `why` alone)
        self._fail(self.supervisor.explain(f"lost a rank: {why}"))

    def _fail(self, reason: str) -> EngineDeadError:
        with self._fail_lock:
            if self.dead_error is not None:
                return self.dead_error
            self.dead_error = EngineDeadError(f"distributed engine failed: {reason}")
        message = f"kubellm: distributed engine failed: {reason}; stopping all ranks"
        if logging.getLogger().hasHandlers():
            log.error(message)
        else:  # nobody set up logging: still say why
            print(message, file=sys.stderr, flush=True)
        self.heartbeat.stop(wait_s=0)
        self.supervisor.kill()
        ps.abort(self.parallel)
        for callback in list(self._dead_callbacks):
            try:
                callback(self.dead_error)
            except Exception:
                log.exception("a dead-engine callback failed")
        return self.dead_error

    def _check_alive(self) -> None:
        if self.dead_error is not None:
            raise self.dead_error
        if self._closed:
            raise EngineDeadError("this engine was shut down")

    # ---- control ---------------------------------------------------------------------
    def describe_ranks(self) -> list[dict]:
        """What every rank holds (see stage.describe_rank), by rank."""
        with self._lock:
            self._check_alive()
            self._send(DESCRIBE)
            gathered = [None] * self.layout.world_size
            dist.gather_object(describe_rank(self.runner, self.layout), gathered, dst=0,
                               group=self.parallel.control_group)
        return gathered

    @property
    def num_steps(self) -> int:
        """Steps executed so far: the StepWork.step the next one will carry."""
        return self._num_steps

    def shutdown(self) -> None:
        """End the workers, leave the process groups, free this rank's tensors. Idempotent;
        the engine calls it on shutdown(), garbage collection and interpreter exit."""
        if self._closed:
            return
        self._closed = True
        self._closing.set()
        self.supervisor.expect_exit()
        # out of the heartbeat group before it is destroyed; a dead peer ends a round
        # at once, a hung one after the heartbeat timeout
        is_out = self.heartbeat.stop(wait_s=self._heartbeat_timeout_s + 2.0)
        # at interpreter exit a daemon engine thread may still be inside a step
        wait_s = SHUTDOWN_WAIT_S if self.dead_error is None else 2.0
        if not self._lock.acquire(timeout=wait_s):
            log.warning("a step is still running after %.0f s: killing the workers", wait_s)
            self.supervisor.kill()
            return
        try:
            if self.dead_error is None and not self._is_mid_step:
                try:
                    self._send(SHUTDOWN)
                except Exception:  # a worker already gone: stop() kills the rest
                    log.warning("could not send shutdown to the workers", exc_info=True)
                self.supervisor.stop()
            else:  # workers wait inside a step (or are gone) and would never hear us
                self.supervisor.kill()
            if is_out:
                ps.destroy()
        finally:
            self._lock.release()
        self.stage.close()
        self.runner.shutdown()

    def _send(self, message) -> None:
        box = [message]
        dist.broadcast_object_list(box, src=0, group=self.parallel.control_group)
        self._last_sent = time.monotonic()

    def _keep_alive(self) -> None:
        while not self._closing.wait(self._keepalive_s / 4) and self.dead_error is None:
            if time.monotonic() - self._last_sent < self._keepalive_s:
                continue
            if not self._lock.acquire(blocking=False):
                continue  # a step is running: that is traffic enough
            try:
                if not self._closed and self.dead_error is None:
                    self._send(KEEPALIVE)
            except Exception as exc:
                self._fail(self.supervisor.explain(f"lost the workers: "
                                                   f"{type(exc).__name__}: {exc}"))
            finally:
                self._lock.release()
