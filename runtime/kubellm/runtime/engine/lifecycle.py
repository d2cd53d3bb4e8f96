"""An engine's life: shut down, or dead.

``shutdown()`` — also run when the engine is garbage collected and, for a multi-process
engine, at interpreter exit — drops its requests, stops its workers, leaves its process
groups and frees its weights, KV cache and CUDA graphs, so that another engine of any
layout can start in the same process. An engine whose executor fails (a worker process
or a rank lost) is dead: ``errored`` turns True, ``dead_error`` says why, its requests
fail with that EngineDeadError and the dead callbacks run (a server turns unready, ends
its requests with 503 and exits non-zero). Either way ``step`` and ``add_request`` raise
``dead_error`` from then on.
"""
from __future__ import annotations

import weakref
from collections.abc import Callable

from kubellm.runtime.core.errors import EngineDeadError


class EngineLifecycle:
    """Mixed into LLMEngine, which holds ``executor``, ``output`` and ``_in_flight``."""

    def _init_lifecycle(self, executor) -> None:
        self._shut_down: EngineDeadError | None = None
        self._shutdown_hooks: list[Callable[[], None]] = []
        # holds the executor, never the engine: dropping the last reference to the engine
        # runs it; at interpreter exit too when worker processes must be stopped
        self._finalizer = weakref.finalize(self, _release, executor, self._shutdown_hooks)
        self._finalizer.atexit = getattr(executor, "needs_shutdown_at_exit", False)

    def shutdown(self) -> None:
        """Drop every request, stop the workers, leave the process groups and free the
        weights, KV cache and CUDA graphs. Idempotent; the engine refuses work afterwards."""
        if self._shut_down is not None:
            return
        self._shut_down = EngineDeadError("this engine was shut down")
        self._in_flight = None
        for request_id in list(self.output.groups):
            self.abort_request(request_id)
        self._finalizer()

    def add_shutdown_hook(self, hook: Callable[[], None]) -> None:
        """``hook()`` runs after the executor has shut down (and only once)."""
        self._shutdown_hooks.append(hook)

    @property
    def dead_error(self) -> EngineDeadError | None:
        """Why this engine can run nothing any more (shut down or failed), else None."""
        return self._shut_down or getattr(self.executor, "dead_error", None)

    @property
    def errored(self) -> bool:
        return self.dead_error is not None

    def add_dead_callback(self, callback: Callable[[EngineDeadError], None]) -> None:
        """``callback(error)`` runs once if the executor fails, on the thread that noticed
        (a watchdog, the heartbeat or the engine's own); single-process engines never do."""
        add = getattr(self.executor, "add_dead_callback", None)
        if add is not None:
            add(callback)

    def remove_dead_callback(self, callback) -> None:
        remove = getattr(self.executor, "remove_dead_callback", None)
        if remove is not None:
            remove(callback)


def _release(executor, hooks: list[Callable[[], None]]) -> None:
    """The engine's finalizer: shut the executor down, then the hooks."""
    try:
        shutdown = getattr(executor, "shutdown", None)
        if shutdown is not None:
            shutdown()
    finally:
        for hook in hooks:
            hook()
