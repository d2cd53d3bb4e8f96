"""Where a request's time goes between the client's send and the core's first step with
it, for benchmarks only: with KUBELLM_TRACE_DIR set, each process (the bench client,
every API server, the engine core) notes ``(event, key, time.monotonic())`` tuples and
writes them to ``<dir>/<name>.trace.json`` when it stops. CLOCK_MONOTONIC is one clock
for every process of the machine, so the files line up
(``python -m benchmarks.serving.arrival_trace DIR`` reads them). Unset, ``open_if_asked``
returns None and the hot paths test one attribute.

Events: client ``burst`` (a workload starts: key ``REQUESTS@RATE``); API server ``body``
(request body read), ``prepared`` (parsed, tokenized), ``sent`` (on the core's socket);
core ``recv`` (taken off the socket), ``step`` (a step starts: key = requests in the
engine), ``stepped`` (it returned), ``first`` (a request's first output left the engine),
``gc_start`` / ``gc_stop`` (a garbage collection: key = its generation).
"""
from __future__ import annotations

import gc
import json
import os
import time

ENV = "KUBELLM_TRACE_DIR"


class Trace:
    __slots__ = ("events", "name")

    def __init__(self, name: str):
        self.name = name
        self.events: list[tuple[str, object, float]] = []

    def mark(self, event: str, key: object = None, at: float | None = None) -> None:
        self.events.append((event, key, time.monotonic() if at is None else at))

    def write(self, directory: str | None = None) -> None:
        directory = directory or os.environ.get(ENV)
        if not directory:
            return
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, f"{self.name}.trace.json")
        with open(path, "w") as fh:
            json.dump({"name": self.name, "events": self.events}, fh)


def open_if_asked(name: str) -> Trace | None:
    return Trace(name) if os.environ.get(ENV) else None


def note_gc_pauses(trace: Trace) -> None:
    """Marks each garbage collection of this process in ``trace``."""
    def on_gc(phase: str, info: dict) -> None:
        trace.mark(f"gc_{phase}", info.get("generation"))
    gc.callbacks.append(on_gc)
