"""The host-work benchmark, shrunk: it runs and prints well-formed figures (their size
says nothing on a shared CPU), the engine core's encoding included."""
import json

from tests.benchmarks.smoke import run_module
from tests.figures import is_figure


def test_host_overhead_smoke_prints_figures():
    proc = run_module("benchmarks.cpu.host_overhead", "--batch", 8, "--context", 32,
                      "--steps", 4, "--core-encoding", "--clock", "cpu")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["batch"] == 8 and result["clock"] == "cpu"
    for key in ("schedule_ms", "prepare_ms", "postprocess_ms", "host_ms", "step_ms",
                "core_encode_ms"):
        assert is_figure(result[key]), (key, result)


def test_host_overhead_smoke_with_spread_lengths_and_the_full_loop():
    for flags in ((), ("--no-steady-decode",)):
        proc = run_module("benchmarks.cpu.host_overhead", "--batch", 8, "--context", 32,
                          "--steps", 20, "--context-spread", "--output-spread", "--clock",
                          "cpu", *flags)
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        assert result["context_spread"] is True and result["output_spread"] is True
        assert result["steady_decode"] is (not flags)
        assert is_figure(result["schedule_ms"]) and is_figure(result["host_ms"]), result


def test_mixed_step_host_smoke_prints_figures():
    proc = run_module("benchmarks.cpu.mixed_step_host", "--blocks", 300, "--decodes", 3,
                      "--prompt", 40, "--repeats", 2)
    rows = [json.loads(line) for line in proc.stdout.strip().splitlines()]
    assert len(rows) == 2 and all(row["blocks"] == 300 for row in rows)
    for row in rows:
        for key in ("wall_ms_two_steps", "schedule_ms", "prepare_ms", "postprocess_ms",
                    "host_ms"):
            assert is_figure(row[key]), (key, row)
