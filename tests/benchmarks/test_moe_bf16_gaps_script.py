"""benchmarks/cpu/moe_bf16_gaps.py on a tiny Mixtral shape: it runs and writes well-formed
figures (what they are says nothing at this size)."""
import json

from tests.benchmarks.smoke import run_module
from tests.figures import is_figure


def test_moe_bf16_gaps_smoke_writes_figures(tmp_path):
    run_module("benchmarks.cpu.moe_bf16_gaps", "--smoke", "--out", tmp_path)
    result = json.loads((tmp_path / "moe_bf16_gaps.json").read_text())
    gaps = result["largest_gap_std_per_prompt"]
    assert len(gaps) == 12 and all(is_figure(g) or g == 0 for g in gaps)
    assert result["worst"]["gap_std"] == max(gaps)
    assert set(result["router_2nd_3rd_margin"]) == {"model.layers.0.mlp.gate",
                                                    "model.layers.1.mlp.gate"}
