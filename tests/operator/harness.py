"""Helpers for running the operator against an API server: kubeconfig, process, polling."""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

import yaml

RESYNC_SECONDS = 1.0


def write_kubeconfig(path: Path, server: str) -> Path:
    config = {"apiVersion": "v1", "kind": "Config", "current-context": "emulator",
              "contexts": [{"name": "emulator",
                            "context": {"cluster": "emulator", "user": "tester"}}],
              "clusters": [{"name": "emulator", "cluster": {"server": server}}],
              "users": [{"name": "tester", "user": {"token": "test-token"}}]}
    path.write_text(yaml.safe_dump(config))
    return path


class OperatorProcess:
    """`kubellm operator` (run as `python -m kubellm.operator`) as a child process."""

    def __init__(self, kubeconfig: Path, log_path: Path, extra_args: list[str]):
        self.kubeconfig, self.log_path, self.extra_args = kubeconfig, log_path, extra_args
        self.process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        log = open(self.log_path, "a", encoding="utf-8")
        self.process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "kubellm.operator", "--resync-seconds",
            str(RESYNC_SECONDS), "--liveness-port", "0", "--log-format", "plain",
            "--default-image", "kubellm:test", *self.extra_args,
            env={**os.environ, "KUBECONFIG": str(self.kubeconfig)},
            stdout=log, stderr=subprocess.STDOUT)

    async def stop(self) -> None:
        if self.process and self.process.returncode is None:
            self.process.terminate()
            try:
                await asyncio.wait_for(self.process.wait(), 10)
            except asyncio.TimeoutError:
                self.process.kill()
                await self.process.wait()

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8") if self.log_path.exists() else ""


async def wait_until(check: Callable[[], Any], timeout: float = 180.0,
                     what: str = "condition", log: Callable[[], str] = lambda: "") -> Any:
    """Poll ``check`` (sync or async) until it returns a truthy value."""
    # The deadline only bounds a failing run: on a loaded CI machine (load 10 on 2 cores
    # measured while several suites ran) a real operator process took over 60 s for what
    # takes 5 s idle.
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = check()
            if isinstance(result, Awaitable):
                result = await result
            if result:
                return result
        except (KeyError, AssertionError, TypeError) as e:  # not there yet
            last_error = e
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what} (last error: {last_error!r})\n"
                         f"operator log tail:\n{log()[-4000:]}")
