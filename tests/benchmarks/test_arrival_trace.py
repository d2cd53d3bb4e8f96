"""The serving benchmark's arrival trace: each process's events written under
KUBELLM_TRACE_DIR, and the per-burst summary built from them (which requests each stage
saw, how many the core's first steps held)."""
from __future__ import annotations

from benchmarks.serving.arrival_trace import bursts, load
from kubellm.runtime.engine_core import trace


def test_traces_line_up_into_bursts(tmp_path, monkeypatch):
    monkeypatch.setenv(trace.ENV, str(tmp_path))
    client, server, core = (trace.open_if_asked(n) for n in ("client", "api_server_0",
                                                             "engine_core"))
    client.mark("burst", "2@inf", at=10.0)
    for rid, t in (("a", 10.001), ("b", 10.002)):
        server.mark("body", rid, at=t)
        server.mark("sent", rid, at=t + 0.001)
        core.mark("recv", rid, at=t + 0.002)
    core.mark("step", 1, at=10.0035)
    core.mark("step", 2, at=10.005)
    core.mark("first", "a", at=10.006)
    core.mark("first", "b", at=10.006)
    client.mark("burst", "2@inf", at=20.0)
    for t in (client, server, core):
        t.write()
    [first, second] = bursts(load(str(tmp_path)))
    assert first["requests"] == 2 and second["requests"] == 0
    assert [round(x, 3) for x in first["stages"]["recv"]] == [3.0, 4.0]
    assert [n for _, n in first["steps"]] == [1, 2]
    assert first["steps_before_last_recv"] == 1


def test_no_trace_unless_asked(monkeypatch):
    monkeypatch.delenv(trace.ENV, raising=False)
    assert trace.open_if_asked("engine_core") is None


def test_step_durations_and_gc_pauses_per_burst(tmp_path, monkeypatch, capsys):
    import gc

    from benchmarks.serving.arrival_trace import main
    monkeypatch.setenv(trace.ENV, str(tmp_path))
    client, core = trace.open_if_asked("client"), trace.open_if_asked("engine_core")
    client.mark("burst", "1@inf", at=10.0)
    core.mark("recv", "a", at=10.001)
    core.mark("step", 1, at=10.002)
    core.mark("gc_start", 2, at=10.003)
    core.mark("gc_stop", 2, at=10.053)
    core.mark("stepped", None, at=10.072)
    core.mark("step", 1, at=10.073)
    core.mark("stepped", None, at=10.078)
    core.mark("first", "a", at=10.079)
    for t in (client, core):
        t.write()
    [row] = bursts(load(str(tmp_path)))
    assert [round(ms) for ms in row["step_ms"]] == [70, 5]
    assert [(gen, round(ms)) for gen, ms in row["gc_ms"]] == [(2, 50)]
    main(str(tmp_path))
    out = capsys.readouterr().out
    assert "over 20 ms: 1 of 2" in out and "gc generation 2: 1 pauses, 50.0 ms" in out
    # the hook marks a real collection in this process
    live = trace.Trace("here")
    trace.note_gc_pauses(live)
    try:
        gc.collect()
    finally:
        gc.callbacks.pop()
    assert [e for e, _, _ in live.events] == ["gc_start", "gc_stop"]
