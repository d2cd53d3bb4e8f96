"""Starting this node's worker processes, and noticing when one of them ends.

Each worker is ``python -m kubellm.runtime.distributed.worker`` with the node's
rendezvous variables plus its local rank, and the read end of a lifeline pipe
(lifeline.py): whatever ends this process, its workers end with it. A watchdog thread
polls them: a worker that exits while the engine runs fails the engine
(``on_failure(reason)``, naming the rank) — the ranks still alive would otherwise wait in
a collective for a peer that will never answer. Failing is the engine's business, not
the process's: the supervisor stops its workers and says why; the engine fails its
requests, and a server exits non-zero.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict

from kubellm.runtime.config import EngineConfig
from kubellm.runtime.distributed.lifeline import Lifeline
from kubellm.runtime.distributed.rendezvous import NodeEnv

log = logging.getLogger(__name__)

POLL_S = 0.2
STOP_GRACE_S = 10.0  # how long workers get to exit after a shutdown message or SIGTERM
NAME_DEAD_RANK_S = 2.0  # after a failed collective, how long to look for the rank that died
_FAIL_LOCK = threading.Lock()


class WorkerSupervisor:
    def __init__(self, node: NodeEnv, config: EngineConfig, local_ranks: range,
                 on_failure: Callable[[str], None] | None = None):
        self.node = node
        self.on_failure = on_failure
        self._stopping = False
        self.failure: str | None = None  # why the workers were stopped, if they failed
        self._procs: dict[int, subprocess.Popen] = {}
        self._lifeline = Lifeline()
        config_json = json.dumps(asdict(config))
        try:
            for local in local_ranks:
                env = {**os.environ, **node.child_env(local), **self._lifeline.child_env()}
                self._procs[node.global_rank(local)] = subprocess.Popen(
                    [sys.executable, "-m", "kubellm.runtime.distributed.worker",
                     "--config-json", config_json], env=env,
                    pass_fds=self._lifeline.pass_fds)
        except BaseException:
            self.kill()
            raise
        self._lifeline.started()
        self._watchdog: threading.Thread | None = None

    @property
    def pids(self) -> dict[int, int]:
        """Global rank -> pid of each worker started here."""
        return {rank: proc.pid for rank, proc in self._procs.items()}

    def start_watchdog(self) -> None:
        self._watchdog = threading.Thread(target=self._watch, name="kubellm-worker-watchdog",
                                          daemon=True)
        self._watchdog.start()

    def _watch(self) -> None:
        while not self._stopping:
            dead = self._first_dead()
            if dead is not None and not self._stopping:
                self.fail(self._describe_dead(*dead))
                return
            time.sleep(POLL_S)

    def _first_dead(self) -> tuple[int, int] | None:
        for rank, proc in self._procs.items():
            code = proc.poll()
            if code is not None:
                return rank, code
        return None

    def _describe_dead(self, rank: int, code: int) -> str:
        return f"worker rank {rank} (pid {self._procs[rank].pid}) exited with " \
               f"{_describe_exit(code)}"

    def explain(self, error: str) -> str:
        """A collective failed on the driver: most often because a worker died, which
        the process table shows a moment later; name it when it does."""
        deadline = time.monotonic() + NAME_DEAD_RANK_S
        while not self._stopping and time.monotonic() < deadline:
            dead = self._first_dead()
            if dead is not None:
                return f"{self._describe_dead(*dead)} (the driver saw: {error})"
            time.sleep(POLL_S)
        return error

    def fail(self, reason: str) -> None:
        """Once: stop every worker of this node and report ``reason``."""
        with _FAIL_LOCK:
            if self.failure is not None:
                return
            self.failure = reason
        self._stopping = True
        self.kill()
        if self.on_failure is not None:
            self.on_failure(reason)

    def expect_exit(self) -> None:
        """The workers are about to be told to stop: their exits are no failure."""
        self._stopping = True

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """Orderly end: wait for workers told to shut down, kill what lingers."""
        self._stopping = True
        deadline = time.monotonic() + grace_s
        for proc in self._procs.values():
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        self._terminate(grace_s=2.0)

    def kill(self) -> None:
        """At once: cut the lifeline, SIGKILL what is left, reap it."""
        self._stopping = True
        self._lifeline.cut()
        for proc in self._procs.values():
            if proc.poll() is None:
                proc.kill()
        for proc in self._procs.values():
            proc.wait()

    def _terminate(self, grace_s: float) -> None:
        self._lifeline.cut()
        alive = [p for p in self._procs.values() if p.poll() is None]
        for proc in alive:
            proc.terminate()
        deadline = time.monotonic() + grace_s
        for proc in alive:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def wait(self) -> int:
        """Worker nodes: block until the workers end. 0 when all exit cleanly; the
        first failure's code (others killed) otherwise. SIGTERM is passed on."""
        def forward(signum, _frame):
            self._stopping = True
            for proc in self._procs.values():
                if proc.poll() is None:
                    proc.send_signal(signum)
        previous = signal.signal(signal.SIGTERM, forward)
        try:
            while True:
                codes = [p.poll() for p in self._procs.values()]
                failed = [c for c in codes if c not in (None, 0)]
                if failed and not self._stopping:
                    rank, code = self._first_dead_nonzero()
                    print(f"kubellm: worker rank {rank} exited with {_describe_exit(code)}; "
                          "stopping this node's workers", file=sys.stderr, flush=True)
                    self._stopping = True
                    self._terminate(grace_s=2.0)
                    return 1
                if all(c is not None for c in codes):
                    return 0 if not failed else 1
                time.sleep(POLL_S)
        finally:
            signal.signal(signal.SIGTERM, previous)

    def _first_dead_nonzero(self) -> tuple[int, int]:
        return next((rank, p.returncode) for rank, p in self._procs.items()
                    if p.returncode not in (None, 0))


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"code {code}"


def run_worker_node(node: NodeEnv, config: EngineConfig) -> int:
    """A node other than 0 (``KUBELLM_NODE_RANK`` > 0): run its workers, serve nothing."""
    log.info("node %d of %d: starting %d worker(s), rendezvous at %s", node.node_rank,
             node.nnodes, node.nproc_per_node, node.init_method)
    return WorkerSupervisor(node, config, range(node.nproc_per_node)).wait()
