"""The engine core's process: an LLMEngine and a loop that does nothing but take requests
and aborts off a socket, step the engine, and push each step's output deltas to the front
end that owns each request.

One thread: the engine is not thread-safe, and ZeroMQ moves bytes in its own (C++)
threads, so Python here never waits on a peer. Between two steps the loop reads whatever
commands have arrived without blocking; idle, it blocks on the socket, a signal, or its
parent's exit. SIGTERM: abort what runs (front ends answer 503), shut the engine down,
exit 0. A parent that dies takes the core with it (exit 1). A failed step fails the
requests in flight and the loop goes on. An engine that cannot go on (EngineDeadError: a
worker process or rank lost, noticed by a step or by the heartbeat while idle) fails every
request with that error (the front ends answer 503) and the core exits 1; the supervisor
then stops the pod.

A request with structured outputs has its grammar compiled on a thread of this process
before the engine sees it (xgrammar releases the GIL while it compiles; a new JSON schema
can take tens of ms): the loop keeps stepping meanwhile, and once the compile is done the
engine's own compile in ``add_request`` is a hit in xgrammar's cache. A spec that does
not compile is refused like any other bad parameter (the front end answers 400).
"""
from __future__ import annotations

import dataclasses
import importlib
import logging
import os
import signal
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor

import zmq

from kubellm.runtime.config import EngineConfig
from kubellm.runtime.config_sources import ConfigError
from kubellm.runtime.core.errors import EngineDeadError
from kubellm.runtime.core.gc_heap import freeze_startup_heap, thaw_startup_heap
from kubellm.runtime.core.sampling_params import ParameterError
from kubellm.runtime.engine_core import profiler, trace, wire
from kubellm.runtime.engine_core.output_delta import DeltaEncoder

log = logging.getLogger("kubellm.engine_core")
IDLE_POLL_MS = 1000  # fallback parent check where pidfds are missing
# An idle core woken by a request keeps reading while more keep coming (each within
# BURST_GAP_MS of the last, for at most BURST_MAX_MS) before its first step: a burst
# spread over the front ends reaches the core over a few ms, and a first step holding
# only the first arrivals makes the others wait a whole step (env overrides: benchmarks).
# A front end that has read requests tells the core (PREPARING when it starts on the first
# of them, then with each add the number it still prepares): while one has some, the
# core waits for them up to BURST_MAX_MS, however slow that front end is.
# It stops gathering as soon as the requests it holds fill the steps planned before the
# first one's results land (their token budgets, counting prompt blocks cached or shared
# within the burst once, or max_num_seqs): what arrives later could not join them, and
# waiting for it delayed every request of the burst (H200, 64 prompts of 512 at once over
# 4 API servers: the first step started at 21.4 ms holding all 64, where 16 fill an
# 8,192-token step). Those are two steps with async scheduling, which plans step 2 right
# after launching step 1 with whatever is waiting then: stopping at one step's worth
# would leave step 2 with the few requests that arrived in between.


def _env_ms(name: str, default: float) -> float:
    """A non-negative number of milliseconds from the environment; a bad value stops the
    core with a message naming the variable (not a bare float() traceback)."""
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise SystemExit(f"kubellm: {name}={text!r}: expected a non-negative number of "
                         "milliseconds")
    return value


BURST_GAP_MS = _env_ms("KUBELLM_CORE_BURST_GAP_MS", 2.0)
BURST_MAX_MS = _env_ms("KUBELLM_CORE_BURST_MAX_MS", 20.0)


@dataclasses.dataclass(frozen=True)
class CoreInfo:
    """What the front ends need, sent once the model is loaded."""
    model_name: str
    max_model_len: int
    vocab_size: int
    tokenizer: str      # what the front ends load their tokenizer from
    pid: int
    max_logprobs: int = 20               # --max-logprobs, resolved (-1: the vocabulary)
    generation_defaults: dict = dataclasses.field(default_factory=dict)  # generation_config
    cache_config: dict = dataclasses.field(default_factory=dict)  # vllm:cache_config_info


def cache_config_info(engine) -> dict[str, str]:
    """vllm:cache_config_info's labels (vLLM's CacheConfig fields) for an engine."""
    config, kv = engine.config, getattr(engine, "kv", None)
    return {"block_size": str(config.block_size), "cache_dtype": config.kv_cache_dtype,
            "cpu_offload_gb": "0", "enable_prefix_caching": str(config.enable_prefix_caching),
            "gpu_memory_utilization": str(config.gpu_memory_utilization),
            "is_attention_free": "False", "num_cpu_blocks": "None",
            "num_gpu_blocks": str(getattr(kv, "num_blocks", None)),
            "num_gpu_blocks_override": str(config.num_kv_blocks), "sliding_window": "None",
            "swap_space": "0"}


def core_info(engine, config: EngineConfig) -> CoreInfo:
    tokenizer = config.tokenizer or getattr(engine, "model_dir", None) or config.model
    vocab_size = int(engine.vocab_size)
    max_logprobs = getattr(engine.config, "max_logprobs", 20)
    return CoreInfo(engine.model_name, engine.config.max_model_len, vocab_size,
                    str(tokenizer), os.getpid(),
                    max_logprobs=vocab_size if max_logprobs == -1 else max_logprobs,
                    generation_defaults=dict(getattr(engine, "generation_defaults", {})),
                    cache_config=cache_config_info(engine))


def shutdown_engine(engine) -> None:
    """The one place the server stops an engine (workers, process groups, memory)."""
    for owner in (engine, getattr(engine, "executor", None)):
        stop = getattr(owner, "shutdown", None)
        if callable(stop):
            stop()
            return


def build_engine(config: EngineConfig, engine_factory: str | None):
    """``engine_factory`` ("module:function", taking the config) builds something other
    than a plain LLMEngine: tests wrap one to inject faults."""
    if engine_factory:
        module, _, name = engine_factory.partition(":")
        return getattr(importlib.import_module(module), name)(config)
    from kubellm.runtime.engine.llm_engine import LLMEngine
    return LLMEngine.from_config(config)


def run_engine_core(config: EngineConfig, ipc_dir: str, num_frontends: int, ready_conn,
                    engine_factory: str | None = None) -> None:
    """Process entry point (multiprocessing, spawn): load, report ready, serve, exit."""
    # Ctrl-C, or a signal to the server's whole process group, is the supervisor's to
    # handle: it stops the core only after the front ends have drained
    os.setpgid(0, 0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    parent_pid = os.getppid()
    try:
        engine = build_engine(config, engine_factory)
    except ConfigError as exc:  # a bad setting the user can fix: the message names it
        ready_conn.send(("config_error", str(exc)))
        raise SystemExit(2) from None
    except BaseException as exc:  # the supervisor prints it and exits
        ready_conn.send(("error", f"{type(exc).__name__}: {exc}"))
        raise SystemExit(1) from None
    core = EngineCore(engine, ipc_dir, num_frontends, parent_pid)
    freeze_startup_heap()   # gc_heap.py: startup's objects leave the collector's scans
    profiler.start_if_asked("engine_core", core.timings)
    ready_conn.send(("ready", core_info(engine, config)))
    ready_conn.close()
    code = core.run()
    if core.trace is not None:
        core.trace.write()
    core.close()
    shutdown_engine(engine)
    thaw_startup_heap()   # else Triton's nanobind bindings report leaks at exit
    logging.shutdown()
    sys.exit(code)


class EngineCore:
    def __init__(self, engine, ipc_dir: str, num_frontends: int, parent_pid: int):
        self.engine = engine
        self.codec = wire.Codec()
        self.deltas = DeltaEncoder()
        # running requests' steady steps come out of the engine as deltas already
        if hasattr(engine, "output"):
            engine.output.delta_encoder = self.deltas
        self.owner: dict[str, int] = {}      # request id -> front end index
        self.context = zmq.Context(io_threads=1)
        self.input = self.context.socket(zmq.PULL)
        self.input.setsockopt(zmq.RCVHWM, 0)
        self.input.bind(wire.input_address(ipc_dir))
        self.outputs = []
        for index in range(num_frontends):
            sock = self.context.socket(zmq.PUSH)
            sock.setsockopt(zmq.SNDHWM, 0)   # never drop, never block the engine
            sock.connect(wire.output_address(ipc_dir, index))
            self.outputs.append(sock)
        self._pending = [_Outbox() for _ in range(num_frontends)]
        self._num_preparing = [0] * num_frontends   # per front end, from its last add
        # while an idle core takes a burst in: the prompt tokens its first step would
        # compute, and the block hashes of the burst's prompts so far (kv tokens_to_compute)
        self._burst_tokens = 0
        self._burst_blocks: set | None = None
        # seconds per phase of the loop, summed (written with a profile, see profiler.py)
        self.timings = {"receive_s": 0.0, "step_s": 0.0, "send_s": 0.0, "steps": 0}
        self._last_stats: dict | None = None
        self.trace = trace.open_if_asked("engine_core")   # benchmarks only (trace.py)
        if self.trace is not None:
            trace.note_gc_pauses(self.trace)
        self._exit_code: int | None = None
        self._poller = zmq.Poller()
        self._poller.register(self.input, zmq.POLLIN)
        self._wakeup_r, wakeup_w = os.pipe()
        os.set_blocking(wakeup_w, False)
        signal.set_wakeup_fd(wakeup_w)
        signal.signal(signal.SIGTERM, self._on_sigterm)
        self._poller.register(self._wakeup_r, zmq.POLLIN)
        # structured-output requests whose grammar compiles: id -> (front end, args, future)
        self._compiling: dict[str, tuple[int, tuple, Future]] = {}
        self._compile_pool: ThreadPoolExecutor | None = None
        self._compiled_r, self._compiled_w = os.pipe()
        os.set_blocking(self._compiled_w, False)
        self._poller.register(self._compiled_r, zmq.POLLIN)
        self._parent_fd = _pidfd(parent_pid)
        self._parent_pid = parent_pid
        if self._parent_fd is not None:
            self._poller.register(self._parent_fd, zmq.POLLIN)

    # ---- the loop --------------------------------------------------------------------
    def run(self) -> int:
        t = self.timings
        clock = time.perf_counter
        while self._exit_code is None:
            if self._engine_died():
                break
            busy = self.engine.has_unfinished_requests()
            t0 = clock()
            if not busy:  # only a hint that comes with this burst counts
                self._num_preparing = [0] * len(self.outputs)
                self._burst_tokens, self._burst_blocks = 0, set()
            self._receive(0 if busy else IDLE_POLL_MS)
            if not busy and (self.owner or any(self._num_preparing)):
                self._gather_burst()
            self._burst_blocks = None
            t1 = clock()
            if self._exit_code is not None:
                break
            if self.engine.has_unfinished_requests():
                if self.trace is not None:
                    self.trace.mark("step", len(self.owner))
                self._step()
                t["steps"] += 1
                if self.trace is not None:
                    self.trace.mark("stepped")
            t2 = clock()
            self._flush()
            t["send_s"] += clock() - t2
            t["step_s"] += t2 - t1
            if busy:  # waiting for work is not the loop's cost
                t["receive_s"] += t1 - t0
        self._abort_everything("the server is shutting down", kind="shutdown")
        self._flush()
        return self._exit_code

    def _gather_burst(self) -> None:
        """Keep taking requests in while they arrive close together (see BURST_GAP_MS),
        or while a front end says it is preparing more."""
        deadline = time.monotonic() + BURST_MAX_MS / 1000
        num_known = len(self.owner) + len(self._compiling)
        while self._exit_code is None:
            left_ms = (deadline - time.monotonic()) * 1000
            if left_ms <= 0 or self._first_step_full():
                return
            # a front end still preparing requests it has read: wait for them (to the cap)
            self._receive(left_ms if any(self._num_preparing) else min(BURST_GAP_MS, left_ms))
            now_known = len(self.owner) + len(self._compiling)
            if now_known == num_known and not any(self._num_preparing):
                return  # a gap with nothing new and nothing announced: the burst is in
            num_known = now_known

    def _first_step_full(self) -> bool:
        """Whether the requests taken in during this idle gather fill the steps planned
        before the first lands (two with async scheduling): their token budgets, or the
        sequences a step holds (False for an engine without a scheduler to ask)."""
        scheduler = getattr(self.engine, "scheduler", None)
        if scheduler is None:
            return False
        planned = 2 if getattr(self.engine, "run_ahead", False) else 1
        return self._burst_tokens >= planned * scheduler.max_num_batched_tokens or \
            len(self.owner) >= scheduler.max_num_seqs

    def _engine_died(self, error: BaseException | None = None) -> bool:
        """True (and the loop ends with exit 1) once the engine can serve nothing more."""
        error = error or getattr(self.engine, "dead_error", None)
        if error is None:
            return False
        log.error("the engine is dead (%s); failing %d request(s), exiting", error,
                  len(self.owner))
        self._abort_everything(str(error), kind="shutdown")
        self._exit_code = 1
        return True

    def _step(self) -> None:
        try:
            outputs = self.engine.step()
        except EngineDeadError as exc:
            self._engine_died(exc)
            return
        except Exception as exc:
            log.exception("engine step failed; failing %d request(s)", len(self.owner))
            self._abort_everything(f"engine step failed: {type(exc).__name__}: {exc}",
                                   kind="engine_error")
            return
        owner, pending, encode = self.owner, self._pending, self.deltas.encode
        for out in outputs:
            if type(out) is list:   # a running request's delta (engine.output.delta_encoder)
                index = owner.get(out[0])
                if index is not None:
                    pending[index].deltas.append(out)
                continue
            index = owner.get(out.request_id)
            if index is None:
                continue  # aborted meanwhile
            if self.trace is not None and not self.deltas.has_sent(out.request_id):
                self.trace.mark("first", out.request_id)
            pending[index].deltas.append(encode(out))
            if out.finished:
                del owner[out.request_id]

    def _receive(self, timeout_ms: int) -> None:
        events = dict(self._poller.poll(timeout_ms))
        if self._wakeup_r in events:
            os.read(self._wakeup_r, 512)
        if self._compiled_r in events:
            os.read(self._compiled_r, 512)
        if self._compiling:
            self._add_compiled()
        if self._parent_fd is not None and self._parent_fd in events \
                or self._parent_fd is None and os.getppid() != self._parent_pid:
            log.error("the server process is gone; the engine core exits")
            self._exit_code = 1
            return
        while True:
            try:
                message = self.input.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            self._apply(self.codec.decode(message))

    def _apply(self, message: list) -> None:
        kind, frontend = message[0], message[1]
        if kind == wire.ADD:
            if self.trace is not None:
                self.trace.mark("recv", message[2])
            self._num_preparing[frontend] = message[6] if len(message) > 6 else 0
            self._add(frontend, *message[2:6])
        elif kind == wire.ABORT:
            for request_id in message[2]:
                if self._compiling.pop(request_id, None) is not None:
                    continue  # its grammar still compiles; nothing reached the engine
                if self.owner.pop(request_id, None) is not None:
                    self.engine.abort_request(request_id)
                    self.deltas.forget(request_id)
        elif kind == wire.PREPARING:  # a front end began preparing requests
            self._num_preparing[frontend] = message[2]
        elif kind == wire.HELLO:  # a front end (re)connected: it needs the stats now
            self._pending[frontend].needs_stats = True
        elif kind == wire.FINISH_SEQUENCE:
            request_id, index = message[2], message[3]
            if request_id in self.owner:
                self.engine.finish_sequence(request_id, index)
                if not self.engine.has_request(request_id):
                    del self.owner[request_id]
                    self.deltas.forget(request_id)

    def _add(self, frontend: int, request_id: str, prompt_token_ids: list[int], params,
             priority: int) -> None:
        grammar = getattr(self.engine, "grammar", None)
        spec = getattr(params, "structured_outputs", None)
        if spec is not None and grammar is not None:
            self._compile_ahead(grammar, spec, frontend,
                                (request_id, prompt_token_ids, params, priority))
            return
        self._add_now(frontend, request_id, prompt_token_ids, params, priority)

    def _compile_ahead(self, grammar, spec, frontend: int, args: tuple) -> None:
        """Compile off the loop; ``_add_compiled`` adds the request once that is done."""
        if self._compile_pool is None:
            self._compile_pool = ThreadPoolExecutor(2, thread_name_prefix="kubellm-grammar")
        future = self._compile_pool.submit(lambda: grammar.get().compile(spec))
        self._compiling[args[0]] = (frontend, args, future)
        future.add_done_callback(self._compiled)

    def _compiled(self, _future) -> None:  # a compile thread: wake the loop
        try:
            os.write(self._compiled_w, b"\0")
        except (BlockingIOError, OSError):
            pass  # the pipe is full (the loop will look anyway) or closed

    def _add_compiled(self) -> None:
        for request_id, (frontend, args, future) in list(self._compiling.items()):
            if not future.done():
                continue
            del self._compiling[request_id]
            error = future.exception()
            if isinstance(error, ParameterError):  # not cached: refuse it here, once
                self._pending[frontend].rejections.append(
                    [request_id, "param", str(error), error.param])
                continue
            self._add_now(frontend, *args)

    def _add_now(self, frontend: int, request_id: str, prompt_token_ids: list[int], params,
                 priority: int) -> None:
        box = self._pending[frontend]
        try:
            self.engine.add_request(request_id, prompt_token_ids, params, priority=priority)
        except ParameterError as exc:
            box.rejections.append([request_id, "param", str(exc), exc.param])
        except EngineDeadError as exc:
            box.rejections.append([request_id, "shutdown", str(exc), None])
        except ValueError as exc:  # PromptTooLongError, token ids out of range, dup id
            box.rejections.append([request_id, "value", str(exc), None])
        except Exception as exc:
            log.exception("engine refused request %s", request_id)
            box.rejections.append([request_id, "internal",
                                   f"engine refused the request: {type(exc).__name__}: {exc}",
                                   None])
        else:
            self.owner[request_id] = frontend
            box.accepted.append(request_id)
            if self._burst_blocks is not None:   # an idle core gathering a burst
                kv = getattr(self.engine, "kv", None)
                self._burst_tokens += len(prompt_token_ids) if kv is None else \
                    kv.tokens_to_compute(prompt_token_ids, self._burst_blocks)

    def _abort_everything(self, message: str, kind: str) -> None:
        if kind == "shutdown":  # a failed step leaves requests still compiling alone
            for request_id, (frontend, _, _) in list(self._compiling.items()):
                self._pending[frontend].rejections.append([request_id, kind, message, None])
            self._compiling.clear()
        for request_id, frontend in list(self.owner.items()):
            try:
                self.engine.abort_request(request_id)
            except Exception:
                log.exception("abort of %s failed", request_id)
            self.deltas.forget(request_id)
            self._pending[frontend].rejections.append([request_id, kind, message, None])
        self.owner.clear()

    def _flush(self) -> None:
        stats = _stats(self.engine)
        changed = stats != self._last_stats
        self._last_stats = stats
        for sock, box in zip(self.outputs, self._pending):
            if box.deltas or box.accepted or box.rejections or box.needs_stats or changed:
                sock.send(self.codec.encode([wire.OUTPUTS, box.deltas, box.accepted,
                                             box.rejections, stats]), copy=False)
                box.clear()

    # ---- lifecycle -------------------------------------------------------------------
    def _on_sigterm(self, *_):
        self._exit_code = 0

    def close(self) -> None:
        for sock in self.outputs:
            sock.close(linger=2000)  # let the last messages (the aborts) reach the front ends
        self.input.close(linger=0)
        self.context.term()
        if self._compile_pool is not None:
            self._compile_pool.shutdown(wait=False, cancel_futures=True)
        os.close(self._compiled_r)
        if self._compile_pool is None:
            os.close(self._compiled_w)
        # else a compile may still finish and write: the process is about to exit anyway


class _Outbox:
    __slots__ = ("deltas", "accepted", "rejections", "needs_stats")

    def __init__(self):
        self.clear()

    def clear(self) -> None:
        self.deltas, self.accepted, self.rejections = [], [], []
        self.needs_stats = False


def _stats(engine) -> dict:
    """The engine's stats as a dict, one level deep: every step sends them, and
    ``dataclasses.asdict``'s deep copy of the step-size histogram cost ~57 µs a step
    (the values are numbers and tuples of numbers; msgpack writes them the same)."""
    try:
        stats = engine.get_stats()
        return {f.name: getattr(stats, f.name) for f in dataclasses.fields(stats)}
    except Exception:
        log.exception("engine.get_stats failed")
        return {}


def _pidfd(pid: int) -> int | None:
    """A descriptor that turns readable when ``pid`` exits (Linux >= 5.3)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None
