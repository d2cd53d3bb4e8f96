"""Running multi-process engines (CPU, gloo) from tests — each in its own process tree,
always under a timeout so that a hang fails the test instead of stalling CI — and
reading a pod's env the way Kubernetes fills it in."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

JOB = Path(__file__).with_name("llm_job.py")
JOB_TIMEOUT_S = 240
# Collectives give up after this long; the tests expect answers in seconds.
DIST_ENV = {"KUBELLM_DIST_TIMEOUT_S": "60", "KUBELLM_DEVICE": "cpu"}


def run_llm_job(tmp_path: Path, model: str, engine: dict, prompts, params,
                env: dict | None = None, name: str = "job", idle_s: float = 0) -> dict:
    job, result = tmp_path / f"{name}.json", tmp_path / f"{name}.result.json"
    job.write_text(json.dumps({"model": model, "engine": engine, "prompts": prompts,
                               "params": params, "idle_s": idle_s}))
    proc = subprocess.run([sys.executable, str(JOB), str(job), str(result)],
                          env={**os.environ, **DIST_ENV, **(env or {})},
                          capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
    if proc.returncode != 0:
        pytest.fail(f"{name} exited with {proc.returncode}:\n{proc.stderr[-6000:]}")
    return json.loads(result.read_text())
