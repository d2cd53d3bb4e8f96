"""benchmarks/gpu/run_all.sh: a stage past its STAGE_SECONDS is stopped with its whole
process group (the GPU is free for the next stage), says so, and the script goes on."""
from __future__ import annotations

import os
import subprocess

from tests.paths import ROOT


def _processes(args: str) -> list[str]:
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line.strip() == args]


def test_a_stage_past_its_seconds_is_stopped_with_its_children(tmp_path):
    out = tmp_path / "out"
    # the idle stage's child sleeps 7,919 s: only the limit can end it
    env = {**os.environ, "OUT": str(out), "STAGES": "idle no-such-stage",
           "IDLE_SECONDS": "7919", "STAGE_SECONDS": "idle=2"}
    proc = subprocess.run(["bash", "benchmarks/gpu/run_all.sh"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (out / "stopped_stages.txt").read_text().strip() == "stage idle: stopped after 2 s"
    assert not _processes("sleep 7919")
