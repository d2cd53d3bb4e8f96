"""benchmarks/gpu/cold_start.py (the `coldstart` GPU stage) runs on the CPU (--smoke) and
writes well-formed figures, so the GPU run cannot fail for a Python error."""
import json
import subprocess
import sys

from tests.figures import is_figure
from tests.paths import ROOT


def test_smoke_run_writes_the_figures(tmp_path):
    # As on the GPU image, which has torch and transformers but none of the operator's
    # own dependencies.
    code = ("import runpy, sys\n"
            "for name in ('jsonschema', 'kopf', 'kubernetes_asyncio'):\n"
            "    sys.modules[name] = None\n"
            "runpy.run_module('benchmarks.gpu.cold_start', run_name='__main__')\n")
    proc = subprocess.run([sys.executable, "-c", code, "--smoke", "--out",
                           str(tmp_path / "out"), "--workdir", str(tmp_path / "m")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "out" / "cold_start.json").read_text())
    for key in ("weights_gib", "write_seconds", "engine_ready_seconds_page_cache",
                "seconds_per_gib", "startup_budget_seconds"):
        assert is_figure(result[key]), key   # a fast disk's write of the tiny model: 0.0 s
    assert result["page_cache_dropped"] is False and result["engine_ready_seconds_cold"] is None
    assert isinstance(result["within_budget"], bool)
    assert not (tmp_path / "m").exists()  # the checkpoint is removed
