"""The MoE GPU benchmark (benchmarks/gpu/moe.py, STAGES=moe) on a tiny shape on the CPU,
kernels in triton's interpreter: every part runs and writes well-formed figures, and the
table it writes is one kubellm.kernels.fused_moe_configs can read."""
import json
import os

from tests.benchmarks.smoke import run_module
from tests.figures import is_figure


def test_smoke_run_writes_every_part(tmp_path):
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run_module("benchmarks.gpu.moe", "--smoke", "--out", tmp_path, env=env)
    result = json.loads((tmp_path / "moe.json").read_text())
    assert result["skipped"] == {}
    table = json.loads((tmp_path / "fused_moe_configs.json").read_text())
    [(device, shapes)] = table.items()
    [(key, buckets)] = shapes.items()
    assert device == "cpu" and key == "E=8,H=64,I=32,K=2,float32"
    from kubellm.kernels.fused_moe_configs import MoeConfig
    for bucket in ("1", "16"):
        config = MoeConfig.from_dict(buckets[bucket])
        assert config.block_m >= 16 and buckets[bucket]["gemms_ms"] > 0
    assert [r["tokens"] for r in result["fused_vs_loop"]] == [1, 16]
    assert all(is_figure(r["fused_ms"]) and is_figure(r["loop_ms"]) for r in result["fused_vs_loop"])
    agreement = result["agreement"]
    assert agreement["num_prompts"] == 3 and agreement["failures"] == []
    w = result["w"]
    assert w["kubellm"]["output_tokens"] == 8 * 6
    assert w["limit"]["limit_output_tok_s"] > 0 and is_figure(w["fraction_of_limit"])
    assert w["limit"]["active_params"] < w["limit"]["total_params"]
