"""Per burst of a ``kubellm bench serve --trace-dir DIR`` run: when the requests reached
each stage (API server body read, prepared, sent to the core; the core's receive, its
first output) in ms from the client's start of the burst, and the core's first steps
with how many requests each held. ``python -m benchmarks.serving.arrival_trace DIR``."""
from __future__ import annotations

import glob
import json
import os
import sys


def load(directory: str) -> dict[str, list]:
    events: dict[str, list] = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.trace.json"))):
        with open(path) as fh:
            recorded = json.load(fh)["events"]
        for event, key, t in recorded:
            events.setdefault(event, []).append((key, t))
    return events


def _spread(times: list[float]) -> str:
    if not times:
        return "-"
    xs = sorted(times)
    return (f"first {xs[0]:7.1f}  p50 {xs[len(xs) // 2]:7.1f}  last {xs[-1]:7.1f}  "
            f"(spread {xs[-1] - xs[0]:6.1f})")


def bursts(events: dict[str, list]) -> list[dict]:
    starts = sorted(events.get("burst", []), key=lambda e: e[1])
    out = []
    for i, (label, t0) in enumerate(starts):
        t1 = starts[i + 1][1] if i + 1 < len(starts) else float("inf")
        ids = {k for k, t in events.get("recv", []) if t0 <= t < t1}

        def ms(kind, t0=t0, ids=ids):
            return [1000 * (t - t0) for k, t in events.get(kind, []) if k in ids]
        firsts = ms("first")
        last_recv = max(ms("recv"), default=0.0)
        steps = [(1000 * (t - t0), n) for n, t in events.get("step", [])
                 if t0 <= t < t1 and 1000 * (t - t0) <= max(firsts, default=0.0)]
        step_starts = [t for _, t in events.get("step", []) if t0 <= t < t1]
        ends = sorted(t for _, t in events.get("stepped", []) if t0 <= t < t1)
        durations = [1000 * (e - s) for s, e in zip(sorted(step_starts), ends)]
        gcs = [(key, 1000 * (stop - start)) for (key, start), (_, stop)
               in zip(sorted(events.get("gc_start", []), key=lambda e: e[1]),
                      sorted(events.get("gc_stop", []), key=lambda e: e[1]))
               if t0 <= start < t1]
        out.append({"burst": label, "requests": len(ids), "step_ms": durations,
                    "gc_ms": gcs,
                    "stages": {kind: ms(kind) for kind in ("body", "prepared", "sent",
                                                         "recv", "first")},
                    "steps_before_last_recv": sum(1 for t, _ in steps if t < last_recv),
                    "steps": steps})
    return out


def main(directory: str) -> None:
    for row in bursts(load(directory)):
        print(f"burst {row['burst']}: {row['requests']} requests (ms from the client's start)")
        for kind, times in row["stages"].items():
            print(f"  {kind:9s} {_spread(times)}")
        print(f"  steps started before the last arrival: {row['steps_before_last_recv']}; "
              "first steps (ms, requests in the engine): "
              + ", ".join(f"{t:.1f}:{n}" for t, n in row["steps"][:8]))
        long = sorted(row["step_ms"], reverse=True)
        if long:
            print(f"  step ms (engine.step, host): p50 {long[len(long) // 2]:.1f}, "
                  f"longest {', '.join(f'{d:.1f}' for d in long[:6])}; over 20 ms: "
                  f"{sum(d > 20 for d in long)} of {len(long)}")
        for gen in (0, 1, 2):
            pauses = [ms for g, ms in row["gc_ms"] if g == gen]
            if pauses:
                print(f"  gc generation {gen}: {len(pauses)} pauses, {sum(pauses):.1f} ms "
                      f"in all, longest {max(pauses):.1f} ms")


if __name__ == "__main__":
    main(sys.argv[1])
