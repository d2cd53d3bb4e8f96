"""Running a benchmark script the way its smoke tests do."""
from __future__ import annotations

import subprocess
import sys

from tests.paths import ROOT


def run_module(module: str, *args, timeout: float = 600,
               env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m module args`` from the repository root; the test fails with the tail of
    its output unless it exits 0."""
    proc = subprocess.run([sys.executable, "-m", module, *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc
