"""The policy driving a simulated fleet through ramp, spike, plateau and idle load."""
import pytest

from benchmarks.autoscaling import simulate as sim


@pytest.fixture(scope="module")
def trace():
    return sim.simulate()


def test_trace_has_the_issue_properties(trace, capsys):
    ticks, waits = trace
    figures = sim.summarize(ticks, waits)
    print("\n".join(f"{k:40s} {v}" for k, v in figures.items()))   # -s shows them
    spec = sim.SPEC

    assert figures["replicas_out_of_bounds"] == []
    # Overload happened (the check is not vacuous) and was answered on the first or
    # second tick each time.
    assert figures["overloaded_ticks"] >= 2
    assert figures["longest_overload_without_scale_up_ticks"] <= 1
    # No oscillation: one swing per load change at most, none under constant load.
    assert figures["direction_reversals"] <= len(sim.PROFILE) - 1
    assert figures["reversals_within_steady_load"] == []
    # Every scale-down came after a whole window of lower recommendations.
    assert figures["scale_downs"] >= 2
    assert figures["early_scale_downs"] == []
    # The spike reached the bound, the idle tail went back to the minimum.
    assert figures["peak_replicas"] == spec.max_replicas
    assert figures["final_replicas"] == spec.min_replicas
    assert figures["unanswered_scrapes"] >= 1   # the unknown-pod path was exercised


def test_busy_plateau_is_held_not_scaled_down(trace):
    # Plateau at 6 req/s = 3 replicas' worth, nothing waiting once the spike drained:
    # the running requests must keep enough replicas, with no change after it settles.
    ticks, _ = trace
    plateau = [k for k in ticks if k.phase == "plateau"]
    settled = plateau[len(plateau) // 2:]
    assert {k.replicas for k in settled} == {settled[0].replicas}
    assert settled[0].replicas >= 3
    assert max(k.waiting for k in settled) <= settled[0].replicas * sim.SPEC.target_queue_depth


def test_scale_down_waits_for_the_window_after_the_spike(trace):
    ticks, _ = trace
    spike_end = next(p.end for p in sim.PROFILE if p.name == "spike")
    first_down = next(k.time for k in ticks if k.time > spike_end and k.replicas < k.replicas_before)
    assert first_down >= spike_end + sim.SPEC.scale_down_stabilization_seconds


def test_script_writes_plot_and_summary(tmp_path, capsys):
    assert sim.main(["--out", str(tmp_path)]) == 0
    png = (tmp_path / "autoscaling_trace.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert '"direction_reversals"' in (tmp_path / "autoscaling_summary.json").read_text()
    assert "peak_replicas" in capsys.readouterr().out
