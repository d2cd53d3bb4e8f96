"""benchmarks/cpu/offline_order.py's smoke run: both orders replayed, figures printed."""
import json

from tests.benchmarks.smoke import run_module
from tests.figures import is_figure


def test_offline_order_smoke_prints_both_orders():
    proc = run_module("benchmarks.cpu.offline_order", "--smoke", "--seeds", "0")
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    runs = {line["order"]: line for line in lines if "order" in line}
    assert set(runs) == {"caller", "longest_first"}
    for run in runs.values():
        assert run["steps"] >= run["longest_output"] and is_figure(run["modeled_h200_s"])
    assert is_figure(lines[-1]["modeled_speedup"])
