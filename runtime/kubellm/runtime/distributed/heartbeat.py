"""Liveness of a TP x PP group, checked every second whether or not requests flow.

Every rank runs a thread that meets the others in a gloo monitored barrier on a group of
its own (ParallelState.heartbeat_group) once per ``INTERVAL_S``. It needs no traffic and
does not wait for a step: the engine thread may be in the middle of one, or idle. A rank
whose process died closes its connections, and the next round fails at once; a rank that
hangs (or whose node vanished) fails the round after ``KUBELLM_HEARTBEAT_TIMEOUT_S``, and
rank 0 names it. The driver then marks its engine failed; a worker whose round fails has
lost the driver (or the group is being torn down) and exits.

Rounds start once every rank has finished building (weights, KV cache, CUDA graphs), so
that slow loading is never mistaken for a lost rank.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from datetime import timedelta

import torch.distributed as dist

from kubellm.runtime.config_sources import ConfigError

log = logging.getLogger(__name__)

INTERVAL_S = 1.0
TIMEOUT_ENV = "KUBELLM_HEARTBEAT_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 10.0


def timeout_s(env: Mapping[str, str]) -> float:
    raw = env.get(TIMEOUT_ENV)
    try:
        value = float(raw) if raw else DEFAULT_TIMEOUT_S
    except ValueError:
        raise ConfigError(TIMEOUT_ENV, f"{TIMEOUT_ENV}={raw!r} is not a number of "
                                       "seconds") from None
    if not value > 0:
        raise ConfigError(TIMEOUT_ENV, f"{TIMEOUT_ENV} must be positive, got {raw!r}")
    return value


class Heartbeat:
    """One rank's rounds; ``on_lost(message)`` runs once, on the heartbeat thread, when a
    round fails (not after ``stop``)."""

    def __init__(self, group, timeout: float, on_lost: Callable[[str], None]):
        self._group = group
        self._timeout = timedelta(seconds=timeout)
        self._on_lost = on_lost
        self._stopping = threading.Event()
        self.rounds = 0
        self._thread = threading.Thread(target=self._run, name="kubellm-heartbeat",
                                        daemon=True)

    def start(self) -> "Heartbeat":
        self._thread.start()
        return self

    def stop(self, wait_s: float) -> bool:
        """No more rounds; True once the thread is out of the group (safe to destroy)."""
        self._stopping.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(wait_s)
        return not self._thread.is_alive()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                dist.monitored_barrier(group=self._group, timeout=self._timeout,
                                       wait_all_ranks=True)
            except Exception as exc:  # what gloo says names the rank or its address
                if not self._stopping.is_set():
                    self._on_lost(f"{type(exc).__name__}: {_first_line(exc)}")
                return
            self.rounds += 1
            self._stopping.wait(INTERVAL_S)


def _first_line(exc: Exception) -> str:
    """What gloo says, without its source location and advice: "Connection closed by
    peer [10.0.3.7]:41234", "[Rank 0]: Ranks 1 failed to pass monitoredBarrier in ..."."""
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    if text.startswith("[/"):  # [/path/to/pair.cc:553] ...
        text = text.split("] ", 1)[-1]
    return text.split(". ", 1)[0] or repr(exc)
