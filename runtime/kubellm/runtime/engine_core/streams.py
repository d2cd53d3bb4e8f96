"""One request's outputs as an async iterator, and the errors that can end it. Shared by
the engine-core client and the in-process AsyncLLMEngine, so routes work with either."""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Callable

from kubellm.runtime.core.errors import EngineDeadError as _EngineDeadError
from kubellm.runtime.core.outputs import RequestOutput


class EngineStepError(RuntimeError):
    """The engine raised inside step(); every request in flight at that moment fails."""


# The engine core is gone (it died, lost a worker, or the server is shutting down): retry
# elsewhere. One class with the engine's own, so a dead engine reads the same in process.
EngineDeadError = _EngineDeadError


class RequestRejected(ValueError):
    """The engine refused to add the request; ``kind`` says why (``param``, ``length``,
    ``value`` are the caller's fault, anything else is the server's)."""

    def __init__(self, kind: str, message: str, param: str | None = None):
        super().__init__(message)
        self.kind = kind
        self.param = param


@dataclass
class RequestTimes:
    """Per-request timestamps (time.monotonic) for the latency histograms."""
    arrival: float
    first_token: float | None = None
    last_token: float | None = None
    num_tokens: int = 0
    n: int = 1                          # the request's parameters the metrics report
    max_tokens: int | None = None


@dataclass
class EngineHooks:
    """Callbacks into the metrics layer; all run on the event loop thread."""
    on_output: Callable[[RequestOutput, RequestTimes, float], None] = lambda *a: None
    on_abort: Callable[[RequestTimes], None] = lambda *a: None


class RequestStream:
    """One request's outputs, newest first: outputs are cumulative, so a consumer that
    falls behind skips straight to the latest one. ``close()`` (idempotent) tells the
    owner, which aborts the request unless it finished."""

    def __init__(self, owner, request_id: str):
        self.owner = owner
        self.request_id = request_id
        self.queue: asyncio.Queue = asyncio.Queue()
        self.times = RequestTimes(arrival=time.monotonic())
        self.finished = False
        self._closed = False
        self._settled = asyncio.Event()   # the core took the request in, or refused it
        self._refusal: BaseException | None = None

    def __aiter__(self):
        return self

    async def __anext__(self) -> RequestOutput:
        if self._closed or (self.finished and self.queue.empty()):
            raise StopAsyncIteration
        item = await self.queue.get()
        while not self.queue.empty() and not isinstance(item, BaseException):
            item = self.queue.get_nowait()
        if isinstance(item, BaseException):
            raise item
        return item

    def put(self, item) -> None:
        if isinstance(item, RequestOutput) and item.finished:
            self.finished = True
        if isinstance(item, BaseException) and not self._settled.is_set():
            self._refusal = item
        self._settled.set()
        self.queue.put_nowait(item)

    def admitted(self) -> None:
        """The engine core has taken the request in."""
        self._settled.set()

    async def wait_admitted(self) -> None:
        """Return once the engine runs the request; raise what ended it before that (a
        refusal: RequestRejected, EngineDeadError)."""
        await self._settled.wait()
        if self._refusal is not None:
            raise self._refusal

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.owner.stream_closed(self)
