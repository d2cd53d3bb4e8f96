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
