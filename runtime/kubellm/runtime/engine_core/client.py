"""EngineCoreClient: a front end's connection to the engine core process, on asyncio.

Requests go out on a PUSH socket; this front end's outputs come back on its own PULL
socket, one message per engine step, read by one task on the event loop that folds each
delta into its request (detokenizing, in assembler.py) and hands every stream its latest
output — no thread, so no lock per token. The core's exit is watched through a pidfd:
every request in flight then ends with EngineDeadError, and ``is_alive`` turns false
(/health and /ready answer 503).
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
from types import SimpleNamespace
from typing import Callable

import zmq
import zmq.asyncio

from kubellm.runtime.core.sampling_params import SamplingParams
from kubellm.runtime.engine_core import trace, wire
from kubellm.runtime.engine_core.assembler import RequestAssembler
from kubellm.runtime.engine_core.core_proc import CoreInfo
from kubellm.runtime.engine_core.streams import (EngineDeadError, EngineHooks,
                                                 EngineStepError, RequestRejected,
                                                 RequestStream)

logger = logging.getLogger("kubellm.server")


class EngineCoreClient:
    def __init__(self, info: CoreInfo, ipc_dir: str, frontend_index: int, tokenizer,
                 hooks: EngineHooks | None = None,
                 on_core_exit: Callable[[], None] | None = None):
        self.info = info
        self.ipc_dir = ipc_dir
        self.index = frontend_index
        self.tokenizer = tokenizer
        self.hooks = hooks or EngineHooks()
        self.on_core_exit = on_core_exit
        self.stats = None                  # the core's last EngineStats, as a namespace
        self._codec = wire.Codec()
        self._requests: dict[str, tuple[RequestStream, RequestAssembler]] = {}
        self._unacknowledged: set[str] = set()   # sent, not yet accepted or refused
        self._context: zmq.asyncio.Context | None = None
        self._task: asyncio.Task | None = None
        self._core_fd: int | None = None
        self._is_dead = False
        self._loop: asyncio.AbstractEventLoop | None = None
        # requests this front end has read and is still preparing (build_app sets it): a
        # hint sent with each add, so that an idle core waits for the rest of a burst
        self.num_preparing: Callable[[], int] = lambda: 0
        self.trace = trace.open_if_asked(f"api_server_{frontend_index}")  # benchmarks only

    # ---- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._context = zmq.asyncio.Context(io_threads=1)
        self._input = self._context.socket(zmq.PUSH)
        self._input.setsockopt(zmq.SNDHWM, 0)
        self._input.connect(wire.input_address(self.ipc_dir))
        self._output = self._context.socket(zmq.PULL)
        self._output.setsockopt(zmq.RCVHWM, 0)
        self._output.bind(wire.output_address(self.ipc_dir, self.index))
        self._task = self._loop.create_task(self._receive_loop())
        self._send([wire.HELLO, self.index])  # the answer (stats) proves the link works
        try:
            self._core_fd = os.pidfd_open(self.info.pid)
            self._loop.add_reader(self._core_fd, self._core_exited)
        except (AttributeError, OSError):  # no pidfd: the supervisor still notices
            self._core_fd = None

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self._core_fd is not None:
            self._loop.remove_reader(self._core_fd)
            os.close(self._core_fd)
            self._core_fd = None
        if self._context is not None:
            self._input.close(linger=500)
            self._output.close(linger=0)
            self._context.term()
            self._context = None

    @property
    def is_alive(self) -> bool:
        return self._context is not None and not self._is_dead

    @property
    def is_connected(self) -> bool:
        """The core has answered (readiness): the sockets carry messages both ways."""
        return self.is_alive and self.stats is not None

    @property
    def num_waiting(self) -> int:
        """The core's queue plus this front end's requests not yet taken in by it."""
        waiting = getattr(self.stats, "num_waiting", 0) if self.stats is not None else 0
        return waiting + len(self._unacknowledged)

    @property
    def num_requests(self) -> int:
        return len(self._requests)

    # ---- requests (event loop) -------------------------------------------------------
    async def add_request(self, request_id: str, prompt_token_ids: list[int],
                          params: SamplingParams, priority: int = 0,
                          prompt: str | None = None) -> RequestStream:
        """Send the request to the core; return its stream of cumulative outputs. The
        caller must ``close()`` the stream (closing an unfinished one aborts it)."""
        if not self.is_alive:
            raise EngineDeadError("the engine core is not running")
        if request_id in self._requests:
            raise ValueError(f"duplicate request id {request_id!r}")
        stream = RequestStream(self, request_id)
        stream.times.n, stream.times.max_tokens = params.n, params.max_tokens
        assembler = RequestAssembler(request_id, prompt, list(prompt_token_ids), params,
                                     self.tokenizer)
        self._requests[request_id] = (stream, assembler)
        self._unacknowledged.add(request_id)
        # the core only sees token ids: text, stop strings and logprob pieces stay here
        core_params = params.clone(detokenize=False) if params.detokenize else params
        self._send([wire.ADD, self.index, request_id, prompt_token_ids,
                    wire.pickled(core_params), priority, self.num_preparing()])
        if self.trace is not None:
            self.trace.mark("sent", request_id)
        return stream

    def preparing(self, num_requests: int) -> None:
        """This front end began preparing requests (read, not yet sent): a hint that
        keeps an idle core from starting a step before they arrive."""
        if self.is_alive:
            self._send([wire.PREPARING, self.index, num_requests])

    def stream_closed(self, stream: RequestStream) -> None:
        self._requests.pop(stream.request_id, None)
        self._unacknowledged.discard(stream.request_id)
        if not stream.finished:
            self._abort([stream.request_id])
            self.hooks.on_abort(stream.times)

    def abort_all(self, error: BaseException) -> None:
        """End every request in flight with ``error`` (shutdown timeout)."""
        ids = list(self._requests)
        for request_id in ids:
            stream, _ = self._requests.pop(request_id)
            stream.put(error)
        self._abort(ids)

    def _abort(self, request_ids: list[str]) -> None:
        if request_ids and self.is_alive:
            self._send([wire.ABORT, self.index, request_ids])

    def _send(self, message) -> None:
        self._input.send(self._codec.encode(message), copy=False)  # unbounded queue: no wait

    # ---- outputs (event loop) --------------------------------------------------------
    async def _receive_loop(self) -> None:
        while True:
            data = await self._output.recv(copy=False)
            try:
                self._dispatch(self._codec.decode(data.buffer))
            except Exception:  # one bad message must not stop the loop for every stream
                logger.exception("could not apply the engine core's outputs")

    def _dispatch(self, message: list) -> None:
        _, deltas, accepted, rejections, stats = message
        now = time.monotonic()
        if stats:
            self.stats = SimpleNamespace(**stats)
        self._unacknowledged.difference_update(accepted)
        for request_id in accepted:
            entry = self._requests.get(request_id)
            if entry is not None:
                entry[0].admitted()
        to_abort = []
        for delta in deltas:
            entry = self._requests.get(delta[0])
            if entry is None:
                continue  # closed meanwhile; its abort is on the way
            stream, assembler = entry
            out, stopped_here = assembler.apply(delta)
            if stopped_here:
                if out.finished:
                    to_abort.append(out.request_id)
                else:
                    for index in stopped_here:
                        self._send([wire.FINISH_SEQUENCE, self.index, out.request_id, index])
            try:
                self.hooks.on_output(out, stream.times, now)
            except Exception:  # metrics must never break serving
                logger.exception("metrics hook failed")
            if out.finished:
                del self._requests[out.request_id]
            stream.put(out)
        for request_id, kind, text, param in rejections:
            self._unacknowledged.discard(request_id)
            entry = self._requests.pop(request_id, None)
            if entry is not None:
                entry[0].put(_rejection_error(kind, text, param))
        self._abort(to_abort)

    def _core_exited(self) -> None:
        self._loop.remove_reader(self._core_fd)
        if self._is_dead:
            return
        self._is_dead = True
        logger.error("the engine core process (pid %d) exited; failing %d request(s)",
                     self.info.pid, len(self._requests))
        error = EngineDeadError("the engine core process exited")
        for stream, _ in self._requests.values():
            stream.put(error)
        self._requests.clear()
        if self.on_core_exit is not None:
            self.on_core_exit()


def _rejection_error(kind: str, message: str, param: str | None) -> BaseException:
    if kind == "engine_error":
        return EngineStepError(message)
    if kind == "shutdown":
        return EngineDeadError(message)
    return RequestRejected(kind, message, param)
