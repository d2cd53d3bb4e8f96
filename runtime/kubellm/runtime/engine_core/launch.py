"""Starting the engine core process and waiting until its model is loaded."""
from __future__ import annotations

import multiprocessing
import shutil
import tempfile
from dataclasses import dataclass

from kubellm.runtime.config import EngineConfig
from kubellm.runtime.engine_core.core_proc import CoreInfo, run_engine_core

# spawn, not fork: the parent may hold CUDA or threads that a fork would copy half-alive
MP = multiprocessing.get_context("spawn")


class EngineCoreStartError(RuntimeError):
    """The core process failed before its model was loaded (the message says why)."""

    def __init__(self, message: str, is_config_error: bool = False):
        super().__init__(message)
        self.is_config_error = is_config_error


@dataclass
class EngineCoreHandle:
    process: multiprocessing.Process
    info: CoreInfo
    ipc_dir: str        # the sockets' directory; removed by close()

    def terminate(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (the core aborts what runs and exits 0), SIGKILL after ``timeout``."""
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(timeout)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)
        return self.process.exitcode

    def close(self) -> None:
        shutil.rmtree(self.ipc_dir, ignore_errors=True)


def start_engine_core(config: EngineConfig, num_frontends: int = 1,
                      engine_factory: str | None = None) -> EngineCoreHandle:
    """Start the core and block until it reports its model loaded (or fails)."""
    ipc_dir = tempfile.mkdtemp(prefix="kubellm-core-")  # mode 0700: only we reach the sockets
    parent_conn, child_conn = MP.Pipe(duplex=False)
    process = MP.Process(target=run_engine_core, name="kubellm-engine-core", daemon=False,
                         args=(config, ipc_dir, num_frontends, child_conn, engine_factory))
    process.start()
    child_conn.close()
    try:
        status, payload = parent_conn.recv()  # EOFError if it died without a word
    except EOFError:
        process.join(5)
        shutil.rmtree(ipc_dir, ignore_errors=True)
        raise EngineCoreStartError(f"the engine core exited with {process.exitcode} "
                                   "before loading the model") from None
    finally:
        parent_conn.close()
    if status != "ready":
        process.join(30)
        shutil.rmtree(ipc_dir, ignore_errors=True)
        raise EngineCoreStartError(payload, is_config_error=status == "config_error")
    return EngineCoreHandle(process, payload, ipc_dir)
