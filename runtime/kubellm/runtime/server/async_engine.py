"""AsyncLLMEngine: the engine's step loop in a thread of this process, fed and drained by
asyncio. The server runs the engine in its own process (engine_core/); this in-process
client is what ``kubellm bench serve --compare-in-process`` measures HTTP against.

``LLMEngine.step()`` is blocking CPU/GPU work and the engine is not thread-safe, so one
thread owns it: every add and abort travels to that thread through a command queue, and
each step's outputs travel back to the event loop in one ``call_soon_threadsafe``. The
event loop therefore never blocks on the model, and no request can take the loop down:
an add that fails fails only its caller; a step that raises fails the requests in flight
and the loop keeps serving new ones.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from dataclasses import dataclass

from kubellm.runtime.engine.llm_engine import TokenizedPrompt
from kubellm.runtime.core.outputs import RequestOutput
from kubellm.runtime.core.sampling_params import SamplingParams
from kubellm.runtime.engine_core.streams import EngineHooks, EngineStepError, RequestStream

logger = logging.getLogger("kubellm.server")

IDLE_WAKEUP_S = 0.5  # an idle loop re-checks for stop() this often





@dataclass
class _Add:
    request_id: str
    prompt: str | list[int] | TokenizedPrompt
    params: SamplingParams
    priority: int
    done: asyncio.Future


@dataclass
class _Abort:
    request_id: str




class AsyncLLMEngine:
    def __init__(self, engine, hooks: EngineHooks | None = None):
        self.engine = engine
        self.hooks = hooks or EngineHooks()
        self.stats = None                       # last engine.get_stats(), set by the thread
        self._commands: collections.deque = collections.deque()
        self._wakeup = threading.Event()
        self._streams: dict[str, RequestStream] = {}  # event loop side
        self._live: set[str] = set()            # engine thread side: added, not finished
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._num_in_transit = 0                # adds sent, not yet accepted or refused

    # ---- lifecycle (event loop thread) ----
    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="kubellm-engine", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping = True
        self._wakeup.set()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def is_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and not self._stopping

    @property
    def num_waiting(self) -> int:
        """Requests not yet running: the engine's waiting queue plus adds still in transit."""
        waiting = getattr(self.stats, "num_waiting", 0) if self.stats is not None else 0
        return waiting + self._num_in_transit

    # ---- requests (event loop thread) ----
    async def add_request(self, request_id: str, prompt: str | list[int] | TokenizedPrompt,
                          params: SamplingParams, priority: int = 0) -> "RequestStream":
        """Admit a request; raise what ``engine.add_request`` raises (PromptTooLongError,
        ParameterError) or return its stream of cumulative outputs. The caller must
        ``close()`` the stream (in a ``finally``): closing an unfinished one aborts it."""
        if request_id in self._streams:
            raise ValueError(f"duplicate request id {request_id!r}")
        stream = RequestStream(self, request_id)
        self._streams[request_id] = stream
        done = self._loop.create_future()
        self._send(_Add(request_id, prompt, params, priority, done))
        self._num_in_transit += 1
        try:
            await done
        except BaseException:  # rejected, or the caller gave up while it was in transit
            self._streams.pop(request_id, None)
            self._send(_Abort(request_id))
            raise
        finally:
            self._num_in_transit -= 1
        stream.admitted()
        return stream

    def abort_all(self) -> None:
        for request_id in list(self._streams):
            self._send(_Abort(request_id))
            self._deliver(request_id, EngineStepError("request aborted: server shutting down"))

    def _send(self, command) -> None:
        self._commands.append(command)
        self._wakeup.set()

    def _deliver(self, request_id: str, item) -> None:
        stream = self._streams.get(request_id)
        if stream is not None:
            stream.put(item)

    def stream_closed(self, stream: RequestStream) -> None:
        self._streams.pop(stream.request_id, None)
        if not stream.finished:
            self._send(_Abort(stream.request_id))
            self.hooks.on_abort(stream.times)

    def _dispatch(self, outputs: list[RequestOutput], now: float) -> None:
        for out in outputs:
            stream = self._streams.get(out.request_id)
            if stream is None:  # already gone (client left); its abort is on the way
                continue
            try:
                self.hooks.on_output(out, stream.times, now)
            except Exception:  # metrics must never break serving
                logger.exception("metrics hook failed")
            stream.put(out)

    # ---- engine thread ----
    def _run(self) -> None:
        while not self._stopping:
            self._apply_commands()
            if not self._live:
                self._publish_stats()
                self._wakeup.wait(IDLE_WAKEUP_S)
                self._wakeup.clear()
                continue
            try:
                outputs = self.engine.step()
            except Exception as exc:
                logger.exception("engine step failed; failing %d request(s)", len(self._live))
                self._fail_live(exc)
                continue
            for out in outputs:
                if out.finished:
                    self._live.discard(out.request_id)
            self._publish_stats()
            if outputs:
                self._loop.call_soon_threadsafe(self._dispatch, outputs, time.monotonic())

    def _apply_commands(self) -> None:
        while self._commands:
            command = self._commands.popleft()
            if isinstance(command, _Add):
                self._apply_add(command)
            elif command.request_id in self._live:
                self._live.discard(command.request_id)
                try:
                    self.engine.abort_request(command.request_id)
                except Exception:
                    logger.exception("abort of %s failed", command.request_id)

    def _apply_add(self, add: _Add) -> None:
        try:
            self.engine.add_request(add.request_id, add.prompt, add.params,
                                    priority=add.priority)
        except Exception as exc:
            self._loop.call_soon_threadsafe(_settle, add.done, exc)
            return
        self._live.add(add.request_id)
        self._loop.call_soon_threadsafe(_settle, add.done, None)

    def _fail_live(self, exc: Exception) -> None:
        failed = list(self._live)
        self._live.clear()
        for request_id in failed:
            try:
                self.engine.abort_request(request_id)
            except Exception:
                logger.exception("abort of %s after a failed step failed", request_id)
        error = EngineStepError(f"engine step failed: {type(exc).__name__}: {exc}")
        for request_id in failed:
            self._loop.call_soon_threadsafe(self._deliver, request_id, error)

    def _publish_stats(self) -> None:
        try:
            self.stats = self.engine.get_stats()
        except Exception:
            logger.exception("engine.get_stats failed")


def _settle(future: asyncio.Future, exc: BaseException | None) -> None:
    if future.done():  # the caller was cancelled meanwhile
        return
    if exc is None:
        future.set_result(None)
    else:
        future.set_exception(exc)
