"""``kubellm serve``'s main process: it starts the engine core, binds the port, starts
the front ends, and watches them all.

- One listening socket per front end, all bound to the port with SO_REUSEPORT, so the
  kernel spreads connections over them; bound after the model loaded, as before.
- SIGTERM (and a first Ctrl-C): every front end drains (lifecycle.py); once all have
  exited, the core is stopped (SIGTERM: it aborts nothing left, shuts the engine down);
  exit 0. A second Ctrl-C stops the waiting.
- Any process that exits on its own — a front end killed, the core dead — is a failure:
  the others are stopped (front ends drain what they still can) and the supervisor exits
  1, so the container restarts. The core and front ends in turn exit when their parent
  dies (they watch it), so no process outlives the pod's main one.
"""
from __future__ import annotations

import logging
import multiprocessing.connection
import os
import shutil
import signal
import socket
import sys
import tempfile

from kubellm.runtime.config import EngineConfig
from kubellm.runtime.engine_core.launch import MP, EngineCoreStartError, start_engine_core
from kubellm.runtime.server.config import ServerConfig
from kubellm.runtime.server.frontend import run_frontend
from kubellm.runtime.server.lifecycle import AFTER_ABORT_GRACE_S, CORE_STOP_TIMEOUT_S

logger = logging.getLogger("kubellm.server")
POLL_S = 0.5


def serve(engine_config: EngineConfig, server_config: ServerConfig,
          engine_factory: str | None = None) -> int:
    """Blocks until drained after SIGTERM/SIGINT (0) or until a process fails (1)."""
    count = server_config.api_server_count
    metrics_dir = None
    if count > 1:  # front ends sum each other's histograms and counters (metrics.py)
        metrics_dir = tempfile.mkdtemp(prefix="kubellm-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    try:
        try:
            core = start_engine_core(engine_config, count, engine_factory)
        except EngineCoreStartError as exc:
            print(f"kubellm: error: {exc}", file=sys.stderr)
            return 2 if exc.is_config_error else 1
        try:
            sockets = bind_sockets(server_config.host, server_config.port, count)
        except OSError as exc:
            print(f"kubellm: error: cannot listen on {server_config.host}:"
                  f"{server_config.port}: {exc}", file=sys.stderr)
            core.terminate(CORE_STOP_TIMEOUT_S)
            core.close()
            return 1
        port = sockets[0].getsockname()[1]
        frontends = []
        for index, sock in enumerate(sockets):
            process = MP.Process(target=run_frontend, name=f"kubellm-api-server-{index}",
                                 args=(index, core.info, core.ipc_dir, server_config, sock))
            process.start()
            frontends.append(process)
            sock.close()
        logger.info("serving on %s:%d with %d API server process(es) and the engine core "
                    "(pid %d)", server_config.host, port, count, core.process.pid)
        try:
            return Supervisor(core, frontends, server_config.shutdown_timeout).run()
        finally:
            core.close()
    finally:
        if metrics_dir is not None:
            shutil.rmtree(metrics_dir, ignore_errors=True)


def bind_sockets(host: str, port: int, count: int) -> list[socket.socket]:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if count > 1:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((host, port))
            port = sock.getsockname()[1]  # port 0: the others take the one it got
            sock.listen(2048)
            sockets.append(sock)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


class Supervisor:
    def __init__(self, core, frontends: list, shutdown_timeout: float):
        self.core = core
        self.frontends = frontends
        self.shutdown_timeout = shutdown_timeout
        self.num_signals = 0

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        while True:
            processes = [p for p in self.frontends if p.exitcode is None] + [self.core.process]
            multiprocessing.connection.wait([p.sentinel for p in processes], timeout=POLL_S)
            if self.core.process.exitcode is not None:
                return self._fail(f"the engine core (pid {self.core.process.pid}) exited "
                                  f"with {_describe(self.core.process.exitcode)}")
            ended = [p for p in self.frontends if p.exitcode is not None]
            if self.num_signals == 0 and ended:
                p = ended[0]
                return self._fail(f"API server {p.name} (pid {p.pid}) exited with "
                                  f"{_describe(p.exitcode)}")
            if self.num_signals and len(ended) == len(self.frontends):
                code = self.core.terminate(CORE_STOP_TIMEOUT_S)
                failed = [p for p in self.frontends if p.exitcode != 0]
                return 1 if failed or code != 0 else 0

    def _on_signal(self, signum, _frame) -> None:
        self.num_signals += 1
        # the first signal drains; a second Ctrl-C tells the front ends to stop waiting
        relay = signal.SIGINT if signum == signal.SIGINT and self.num_signals > 1 \
            else signal.SIGTERM
        if self.num_signals == 1 or relay == signal.SIGINT:
            for p in self.frontends:
                if p.exitcode is None:
                    os.kill(p.pid, relay)

    def _fail(self, reason: str) -> int:
        logger.error("kubellm: %s; stopping the server", reason)
        print(f"kubellm: error: {reason}; stopping the server", file=sys.stderr, flush=True)
        for p in self.frontends:  # they drain what they still can (503 if the core is gone)
            if p.exitcode is None:
                p.terminate()
        for p in self.frontends:
            p.join(self.shutdown_timeout + 2 * AFTER_ABORT_GRACE_S)
            if p.exitcode is None:
                p.kill()
                p.join(5)
        self.core.terminate(CORE_STOP_TIMEOUT_S)
        return 1


def _describe(code: int | None) -> str:
    if code is not None and code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"status {code}"
