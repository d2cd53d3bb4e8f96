"""Fixtures: the API emulator on loopback with a kubeconfig for it, the operator process."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import kmock
import pytest_asyncio

from .emulator import StampingEmulator
from .harness import OperatorProcess, write_kubeconfig


@pytest_asyncio.fixture()
async def cluster(tmp_path: Path) -> Any:
    """The emulator, serving on a random loopback port, with ``.kubeconfig`` set."""
    async with StampingEmulator() as emulator, kmock.Server(emulator):
        emulator.declare_resources()
        emulator.kubeconfig = write_kubeconfig(tmp_path / "kubeconfig",
                                               str(emulator.url).rstrip("/"))
        yield emulator


@pytest_asyncio.fixture()
async def operator(cluster: Any, tmp_path: Path) -> Any:
    proc = OperatorProcess(cluster.kubeconfig, tmp_path / "operator.log", [])
    await proc.start()
    yield proc
    await proc.stop()
    # The operator must never die on its own: a crash is a failure of the test.
    assert proc.process.returncode in (0, -15), proc.log()[-3000:]
