"""benchmarks/cpu/moe_bf16_gaps.py on a tiny Mixtral shape: it runs and writes well-formed
figures (what they are says nothing at this size)."""
import json
import subprocess
import sys

from tests.figures import is_figure
from tests.paths import ROOT


def test_moe_bf16_gaps_smoke_writes_figures(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "benchmarks.cpu.moe_bf16_gaps", "--smoke",
                           "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "moe_bf16_gaps.json").read_text())
    gaps = result["largest_gap_std_per_prompt"]
    assert len(gaps) == 12 and all(is_figure(g) or g == 0 for g in gaps)
    assert result["worst"]["gap_std"] == max(gaps)
    assert set(result["router_2nd_3rd_margin"]) == {"model.layers.0.mlp.gate",
                                                    "model.layers.1.mlp.gate"}
