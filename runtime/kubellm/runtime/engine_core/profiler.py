"""Where a process's time goes, cheaply enough to leave on during a benchmark: with
KUBELLM_PROFILE_DIR set, a thread samples every thread's Python stack every few
milliseconds (holding the GIL for microseconds), and at exit writes
``<dir>/<name>.profile.txt``: the functions most often on top of a stack (self time) and
anywhere on it (inclusive time), as shares of the samples. py-spy does this from outside
but is not on the GPU image; cProfile's per-call cost would distort what it measures.
"""
from __future__ import annotations

import atexit
import collections
import os
import sys
import threading
import time

ENV = "KUBELLM_PROFILE_DIR"
INTERVAL_S = 0.005
TOP = 40


def start_if_asked(name: str, counters: dict | None = None) -> None:
    """Start sampling this process when KUBELLM_PROFILE_DIR is set; ``counters`` (a dict
    the caller keeps filling, e.g. seconds per loop phase) is written beside it."""
    directory = os.environ.get(ENV)
    if not directory:
        return
    os.makedirs(directory, exist_ok=True)
    sampler = _Sampler()
    sampler.start()
    atexit.register(sampler.write, os.path.join(directory, f"{name}.profile.txt"), counters)


class _Sampler(threading.Thread):
    def __init__(self):
        super().__init__(name="kubellm-profiler", daemon=True)
        self._stopping = threading.Event()
        self.own = collections.Counter()
        self.inclusive = collections.Counter()
        self.num_samples = 0
        self.started = time.monotonic()

    def run(self) -> None:
        me = threading.get_ident()
        while not self._stopping.wait(INTERVAL_S):
            for thread_id, frame in sys._current_frames().items():
                if thread_id == me:
                    continue
                self.num_samples += 1
                self.own[_where(frame)] += 1
                seen = set()
                while frame is not None:
                    seen.add(_where(frame))
                    frame = frame.f_back
                for where in seen:
                    self.inclusive[where] += 1

    def write(self, path: str, counters: dict | None) -> None:
        # the sampling thread stops first: reading its counters while it adds a new frame
        # raised "dictionary changed size during iteration" inside atexit, and the profile
        # was silently missing (1 run in 3 of the serve stage's test, loaded machine)
        self._stopping.set()
        if self.is_alive() and self is not threading.current_thread():
            self.join(5 * INTERVAL_S + 1.0)
        total = max(1, self.num_samples)
        lines = [f"{self.num_samples} stack samples over {time.monotonic() - self.started:.1f}"
                 f" s (every {INTERVAL_S * 1e3:.0f} ms, all threads; an idle thread "
                 "waiting in a C call counts too)", ""]
        if counters:
            lines += ["counters: " + ", ".join(f"{k}={v:.3f}" if isinstance(v, float)
                                               else f"{k}={v}" for k, v in counters.items()),
                      ""]
        for title, counter in (("self", self.own), ("inclusive", self.inclusive)):
            lines.append(f"top {TOP} by {title} share")
            lines += [f"{100 * n / total:6.2f}%  {where}"
                      for where, n in counter.most_common(TOP)]
            lines.append("")
        with open(path, "w") as fh:
            fh.write("\n".join(lines))


def _where(frame) -> str:
    code = frame.f_code
    return f"{code.co_name} ({os.path.basename(code.co_filename)}:{code.co_firstlineno})"
