"""A front end's uvicorn with a graceful drain on SIGTERM (and the first SIGINT).

Kubernetes sends SIGTERM, then SIGKILL after terminationGracePeriodSeconds. On SIGTERM we
keep the socket open but answer 503 (/ready at once, so the endpoint leaves the Service;
new /v1 requests, so stragglers retry elsewhere), let requests in flight finish for up to
``shutdown_timeout`` seconds, then end what is left with 503 + Retry-After (or, mid-stream,
an error event with code service_unavailable, then [DONE]) and exit 0. Uvicorn's own
handler would instead stop listening at once (refused connections, not 503s) and re-raise
the signal after shutdown (exit status -15).

After the drain, at most EXIT_AFTER_DRAIN_S pass before the pod's processes are gone (the
operator's terminationGracePeriodSeconds leaves room for it; tests/contract checks).
"""
from __future__ import annotations

import asyncio
import logging
import signal
import time

import uvicorn

from kubellm.runtime.engine_core.streams import EngineDeadError
from kubellm.runtime.server.config import ServerConfig
from kubellm.runtime.server.state import ServerState

logger = logging.getLogger("kubellm.server")
AFTER_ABORT_GRACE_S = 2.0  # lets aborted streams send their last bytes
CORE_STOP_TIMEOUT_S = 5.0  # the supervisor's wait for the engine core after the front ends
# drain end -> everything exited: aborted streams, uvicorn's close, the core's exit
EXIT_AFTER_DRAIN_S = 2 * AFTER_ABORT_GRACE_S + CORE_STOP_TIMEOUT_S


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, state: ServerState, shutdown_timeout: float):
        super().__init__(config)
        self.state = state
        self.shutdown_timeout = shutdown_timeout
        self.is_drain_requested = False
        self._drain_task: asyncio.Task | None = None

    def handle_exit(self, sig: int, frame) -> None:
        if self.is_drain_requested:
            if sig == signal.SIGINT:  # a second Ctrl-C: stop waiting
                self.force_exit = self.should_exit = True
            return
        self.is_drain_requested = True
        self.state.is_draining = True  # signal handlers run on the loop's thread

    async def on_tick(self, counter: int) -> bool:
        if self.is_drain_requested and self._drain_task is None:
            self._drain_task = asyncio.create_task(self._drain())
        return await super().on_tick(counter)

    async def _drain(self) -> None:
        logger.info("draining: %d request(s) in flight, waiting up to %.0f s",
                    self.state.num_in_flight, self.shutdown_timeout)
        deadline = time.monotonic() + self.shutdown_timeout
        while self.state.num_in_flight > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if self.state.num_in_flight > 0:
            logger.warning("shutdown timeout: aborting %d request(s)", self.state.num_in_flight)
            self.state.engine_client.abort_all(EngineDeadError(
                "the server is shutting down and the request ran past --shutdown-timeout"))
            deadline = time.monotonic() + AFTER_ABORT_GRACE_S
            while self.state.num_in_flight > 0 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
        logger.info("drained; exiting")
        self.should_exit = True


def uvicorn_config(app, config: ServerConfig, **overrides) -> uvicorn.Config:
    return uvicorn.Config(app, host=config.host, port=config.port,
                          log_level=config.uvicorn_log_level,
                          timeout_graceful_shutdown=AFTER_ABORT_GRACE_S,
                          **overrides)
