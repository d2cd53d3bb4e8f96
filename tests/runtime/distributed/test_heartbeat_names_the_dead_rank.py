"""The heartbeat's collective breaks the moment a worker is killed, often before the
watchdog's next look at the process table: the engine's error still names the rank and
the signal (CI once saw only "lost a rank: ... Connection closed by peer")."""
from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

from kubellm.runtime.distributed import launcher
from kubellm.runtime.distributed.executor import DistributedExecutor
from kubellm.runtime.distributed.launcher import WorkerSupervisor


def _supervisor_of(procs: dict) -> WorkerSupervisor:
    supervisor = WorkerSupervisor.__new__(WorkerSupervisor)   # no workers started
    supervisor._procs, supervisor._stopping = procs, False
    return supervisor


def _lost(supervisor, why: str) -> str:
    failures = []
    executor = SimpleNamespace(supervisor=supervisor, _fail=failures.append)
    DistributedExecutor._on_heartbeat_lost(executor, why)
    [reason] = failures
    return reason


def test_a_killed_worker_is_named_with_its_signal():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    proc.kill()
    proc.wait()
    reason = _lost(_supervisor_of({1: proc}), "RuntimeError: Connection closed by peer")
    assert reason.startswith(f"worker rank 1 (pid {proc.pid}) exited with signal SIGKILL")
    assert reason.endswith("(the driver saw: lost a rank: RuntimeError: Connection closed "
                           "by peer)")


def test_a_hung_rank_keeps_the_heartbeats_own_words(monkeypatch):
    monkeypatch.setattr(launcher, "NAME_DEAD_RANK_S", 0.2)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        reason = _lost(_supervisor_of({1: proc}), "Ranks 1 failed to pass monitoredBarrier")
        assert reason == "lost a rank: Ranks 1 failed to pass monitoredBarrier"
    finally:
        proc.kill()
        proc.wait()
