"""One HTTP front end process (``--api-server-count`` of them): a tokenizer, a client of
the engine core, the app, and uvicorn on a listening socket the supervisor bound.

It exits 0 after a drain (SIGTERM), and 1 when the engine core exits under it: its
requests then end with 503 and /health with it, and the supervisor stops the pod."""
from __future__ import annotations

import logging
import os
import socket
import sys

from kubellm.runtime.core.gc_heap import freeze_startup_heap, thaw_startup_heap
from kubellm.runtime.engine_core import profiler
from kubellm.runtime.engine_core.client import EngineCoreClient
from kubellm.runtime.engine_core.core_proc import CoreInfo
from kubellm.runtime.server.app import build_app
from kubellm.runtime.server.config import ServerConfig
from kubellm.runtime.server.lifecycle import DrainingServer, uvicorn_config

logger = logging.getLogger("kubellm.server")


def load_tokenizer(info: CoreInfo):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(info.tokenizer)


def run_frontend(index: int, info: CoreInfo, ipc_dir: str, config: ServerConfig,
                 sock: socket.socket) -> None:
    """Process entry point (multiprocessing, spawn)."""
    os.setpgid(0, 0)  # a terminal's Ctrl-C reaches the supervisor only, which relays it
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    profiler.start_if_asked(f"api_server_{index}")
    tokenizer = load_tokenizer(info)
    logger.info("API server %d (pid %d) started", index, os.getpid())
    died = []

    def core_exited():
        died.append(True)
        server.should_exit = True

    client = EngineCoreClient(info, ipc_dir, index, tokenizer, on_core_exit=core_exited)
    app = build_app(client, tokenizer, info, config)
    freeze_startup_heap()   # the tokenizer and the app live as long as the process
    server = DrainingServer(uvicorn_config(app, config), app.state.kubellm,
                            config.shutdown_timeout)
    server.run(sockets=[sock])
    if client.trace is not None:
        client.trace.write()
    thaw_startup_heap()
    sys.exit(1 if died else 0)
