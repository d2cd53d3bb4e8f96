"""The host-work benchmark, shrunk: it runs and prints well-formed figures (their size
says nothing on a shared CPU), the engine core's encoding included."""
import json
import subprocess
import sys

from tests.figures import is_figure
from tests.paths import ROOT


def test_host_overhead_smoke_prints_figures():
    proc = subprocess.run([sys.executable, "-m", "benchmarks.cpu.host_overhead", "--batch", "8",
                           "--context", "32", "--steps", "4", "--core-encoding",
                           "--clock", "cpu"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["batch"] == 8 and result["clock"] == "cpu"
    for key in ("schedule_ms", "prepare_ms", "postprocess_ms", "host_ms", "step_ms",
                "core_encode_ms"):
        assert is_figure(result[key]), (key, result)
