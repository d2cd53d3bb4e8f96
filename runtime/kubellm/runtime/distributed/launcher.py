"""Starting this node's worker processes and stopping everything when one of them dies.

Each worker is ``python -m kubellm.runtime.distributed.worker`` with the node's
rendezvous variables plus its local rank. A watchdog thread polls them: a worker that
exits while the engine runs takes the whole group down — the others are killed and the
process exits non-zero with a message naming the rank — because the ranks still alive
would otherwise wait in a collective for a peer that will never answer.
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
from dataclasses import asdict
from typing import NoReturn

from kubellm.runtime.config import EngineConfig
from kubellm.runtime.distributed.rendezvous import NodeEnv

log = logging.getLogger(__name__)

POLL_S = 0.2
STOP_GRACE_S = 10.0  # how long workers get to exit after a shutdown message or SIGTERM


class WorkerSupervisor:
    def __init__(self, node: NodeEnv, config: EngineConfig, local_ranks: range):
        self.node = node
        self._stopping = False
        self._abort_lock = threading.Lock()
        self._procs: dict[int, subprocess.Popen] = {}
        config_json = json.dumps(asdict(config))
        for local in local_ranks:
            env = {**os.environ, **node.child_env(local)}
            self._procs[node.global_rank(local)] = subprocess.Popen(
                [sys.executable, "-m", "kubellm.runtime.distributed.worker",
                 "--config-json", config_json], env=env)
        self._watchdog: threading.Thread | None = None

    def start_watchdog(self) -> None:
        self._watchdog = threading.Thread(target=self._watch, name="kubellm-worker-watchdog",
                                          daemon=True)
        self._watchdog.start()

    def _watch(self) -> None:
        while not self._stopping:
            dead = self._first_dead()
            if dead is not None and not self._stopping:
                rank, code = dead
                self.abort(f"worker rank {rank} (pid {self._procs[rank].pid}) exited with "
                           f"{_describe_exit(code)}")
            time.sleep(POLL_S)

    def _first_dead(self) -> tuple[int, int] | None:
        for rank, proc in self._procs.items():
            code = proc.poll()
            if code is not None:
                return rank, code
        return None

    def abort_after_error(self, error: str) -> NoReturn:
        """A collective failed on the driver: most often because a worker died, which
        the process table shows a moment later; name it when it does."""
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            dead = self._first_dead()
            if dead is not None:
                rank, code = dead
                self.abort(f"worker rank {rank} (pid {self._procs[rank].pid}) exited with "
                           f"{_describe_exit(code)} (the driver saw: {error})")
            time.sleep(POLL_S)
        self.abort(error)

    def abort(self, reason: str) -> NoReturn:
        """Stop every rank of this node and exit this process non-zero."""
        if not self._abort_lock.acquire(blocking=False):
            while True:  # another thread is already stopping everything and exiting
                time.sleep(1)
        self._stopping = True
        message = f"kubellm: distributed engine failed: {reason}; stopping all ranks"
        if logging.getLogger().hasHandlers():
            log.error(message)
        else:  # nobody set up logging: still say why we die
            print(message, file=sys.stderr, flush=True)
        self._terminate(grace_s=2.0)
        logging.shutdown()
        os._exit(1)

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

    def _terminate(self, grace_s: float) -> None:
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
