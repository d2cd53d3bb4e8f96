"""A simulated fleet under a load profile, driven by the real policy.

    python -m benchmarks.autoscaling.simulate [--out benchmarks/results]

Each replica runs up to ``slots`` requests at once, each for ``service_seconds`` (so it
serves slots/service_seconds requests per second) and queues the rest; a least-request
balancer sends each arrival (Poisson, seeded) to the ready replica with the fewest
requests; new replicas serve after ``startup_seconds``; removed ones stop receiving
requests and finish what they hold. Every scrape interval the autoscaler sees each
ready pod's waiting/running counts (a few pods do not answer) and the policy decides.
The trace is checked against the autoscaler's promises (see ``check``), plotted, and
summarised.
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import math
import pathlib
import random
import sys

from kubellm.operator.autoscaling.config import AutoscalingSpec
from kubellm.operator.autoscaling.history import MetricHistory, Sample
from kubellm.operator.autoscaling.metrics import PodLoad, to_sample
from kubellm.operator.autoscaling.policy import decide


@dataclasses.dataclass(frozen=True)
class Phase:
    name: str
    start: float
    end: float
    rate_from: float   # requests per second at start, linearly to rate_to at end
    rate_to: float


# Replica capacity below is 2 req/s: the ramp peaks at 4 replicas' worth, the spike needs
# 10, the plateau 3; then the load stops.
PROFILE = (
    Phase("ramp", 0, 600, 0.2, 8.0),
    Phase("spike", 600, 780, 20.0, 20.0),
    Phase("plateau", 780, 1980, 6.0, 6.0),
    Phase("idle", 1980, 2700, 0.0, 0.0),
)

SPEC = AutoscalingSpec(enabled=True, min_replicas=1, max_replicas=12, target_queue_depth=8,
                       metrics_window_seconds=60, scrape_interval_seconds=15,
                       scale_up_stabilization_seconds=0,
                       scale_down_stabilization_seconds=300, max_scale_up_step=4)


@dataclasses.dataclass(frozen=True)
class FleetModel:
    slots: int = 16                 # requests one replica runs at once
    service_seconds: float = 8.0    # time one request runs
    startup_seconds: float = 45.0   # pod start to Ready (image, weights)
    scrape_failure: float = 0.05    # chance a ready pod does not answer one scrape
    seed: int = 0

    @property
    def replica_rate(self) -> float:
        return self.slots / self.service_seconds


@dataclasses.dataclass
class _Replica:
    ready_at: float
    draining: bool = False
    waiting: collections.deque = dataclasses.field(default_factory=collections.deque)
    running: list = dataclasses.field(default_factory=list)   # finish times

    def load(self) -> int:
        return len(self.waiting) + len(self.running)


@dataclasses.dataclass(frozen=True)
class Tick:
    time: float
    phase: str
    rate: float
    replicas_before: int
    replicas: int          # spec.replicas after the decision
    ready: int
    waiting: int           # true fleet queue
    running: int
    observed_waiting: float | None   # what the autoscaler estimated (None: nobody answered)
    recommended: int | None
    reason: str


def rate_at(t: float, profile=PROFILE) -> tuple[str, float]:
    for p in profile:
        if p.start <= t < p.end:
            return p.name, p.rate_from + (p.rate_to - p.rate_from) * (t - p.start) / (p.end - p.start)
    return profile[-1].name, profile[-1].rate_to


def simulate(spec: AutoscalingSpec = SPEC, model: FleetModel = FleetModel(),
             profile=PROFILE) -> tuple[list[Tick], list[float]]:
    """Run the fleet for the whole profile; returns the ticks and every queue wait (s)."""
    rng = random.Random(model.seed)
    fleet = [_Replica(ready_at=0.0) for _ in range(spec.min_replicas)]
    replicas = spec.min_replicas
    history, last_scale = MetricHistory(), None
    ticks: list[Tick] = []
    queue_waits: list[float] = []
    end = profile[-1].end
    tick_every = int(spec.scrape_interval_seconds)
    for t in range(int(end) + 1):
        phase, rate = rate_at(t, profile)
        serving = [r for r in fleet if r.ready_at <= t and not r.draining]
        for _ in range(_poisson(rng, rate)):
            target = min(serving or fleet, key=_Replica.load)
            target.waiting.append(t)
        for r in fleet:
            if r.ready_at > t:
                continue
            r.running = [f for f in r.running if f > t]
            while r.waiting and len(r.running) < model.slots:
                queue_waits.append(t - r.waiting.popleft())
                r.running.append(t + model.service_seconds)
        fleet = [r for r in fleet if not (r.draining and r.load() == 0)]

        if t % tick_every:
            continue
        sample = _scrape(t, [r for r in fleet if r.ready_at <= t and not r.draining],
                         replicas, rng, model)
        history = history.record(sample, spec)
        decision = decide(history, spec, replicas, last_scale, t)
        before = replicas
        if decision.replicas != replicas:
            fleet = _resize(fleet, decision.replicas, t, model)
            replicas, last_scale = decision.replicas, float(t)
        ready = [r for r in fleet if r.ready_at <= t and not r.draining]
        ticks.append(Tick(t, phase, rate, before, replicas, len(ready),
                          sum(len(r.waiting) for r in fleet),
                          sum(len(r.running) for r in fleet),
                          sample.fleet_waiting if sample.is_known else None,
                          decision.recommended, decision.reason))
    return ticks, queue_waits


def _scrape(t: float, ready: list[_Replica], replicas: int, rng: random.Random,
            model: FleetModel) -> Sample:
    loads = [PodLoad(len(r.waiting), len(r.running))
             if rng.random() >= model.scrape_failure else None for r in ready]
    return to_sample(loads, float(t), replicas)


def _resize(fleet: list[_Replica], replicas: int, t: float, model: FleetModel) -> list[_Replica]:
    active = [r for r in fleet if not r.draining]
    for _ in range(replicas - len(active)):
        fleet.append(_Replica(ready_at=t + model.startup_seconds))
    # Remove pods that are still starting first, then the least loaded ones.
    for r in sorted(active, key=lambda r: (r.ready_at <= t, r.load()))[:max(0, len(active) - replicas)]:
        r.draining = True
    return fleet


def _poisson(rng: random.Random, mean: float) -> int:
    # Knuth's method is plenty for the means here (< 30 per second).
    if mean <= 0:
        return 0
    limit, k, p = math.exp(-mean), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


def check(ticks: list[Tick], spec: AutoscalingSpec = SPEC,
          model: FleetModel = FleetModel(), profile=PROFILE) -> dict:
    """The autoscaler's promises about a trace, as figures (the test asserts on them)."""
    interval = spec.scrape_interval_seconds
    out_of_bounds = [k.time for k in ticks
                     if not spec.min_replicas <= k.replicas <= spec.max_replicas]

    # Overloaded: more arrivals than the replicas set can serve, and a queue above the
    # target for them (replicas still starting will drain a queue arrivals don't refill).
    def overloaded(k: Tick) -> bool:
        return (k.observed_waiting is not None and k.replicas_before < spec.max_replicas
                and k.rate > k.replicas_before * model.replica_rate
                and k.observed_waiting > k.replicas_before * spec.target_queue_depth)

    # A scale-up must come on the first or second overloaded tick: the longest run of
    # overloaded ticks that did not scale up must be at most 1.
    overloaded_ticks, run, longest_run = 0, 0, 0
    for k in ticks:
        overloaded_ticks += overloaded(k)
        run = run + 1 if overloaded(k) and k.replicas <= k.replicas_before else 0
        longest_run = max(longest_run, run)

    events = [(k.time, k.replicas - k.replicas_before) for k in ticks
              if k.replicas != k.replicas_before]
    reversals = [(a[0], b[0]) for a, b in zip(events, events[1:]) if (a[1] > 0) != (b[1] > 0)]
    # Under constant load the replicas may settle in one direction, never swing back.
    steady = {p.name for p in profile if p.rate_from == p.rate_to}
    steady_reversals = [b for a, b in reversals
                        if rate_at(a, profile)[0] == rate_at(b, profile)[0] in steady]

    early_scale_downs = []
    for k in ticks:
        if k.replicas < k.replicas_before:
            recent = [j for j in ticks
                      if k.time - spec.scale_down_stabilization_seconds < j.time <= k.time]
            if (k.time < spec.scale_down_stabilization_seconds
                    or any((j.recommended or 0) > k.replicas for j in recent)):
                early_scale_downs.append(k.time)

    return {
        "ticks": len(ticks),
        "scrape_interval_s": interval,
        "replicas_out_of_bounds": out_of_bounds,
        "overloaded_ticks": overloaded_ticks,
        "longest_overload_without_scale_up_ticks": longest_run,
        "scale_ups": sum(d > 0 for _, d in events),
        "scale_downs": sum(d < 0 for _, d in events),
        "direction_reversals": len(reversals),
        "reversals_within_steady_load": steady_reversals,
        "early_scale_downs": early_scale_downs,
        "peak_replicas": max(k.replicas for k in ticks),
        "final_replicas": ticks[-1].replicas,
    }


def summarize(ticks: list[Tick], waits: list[float], model: FleetModel = FleetModel(),
              spec: AutoscalingSpec = SPEC) -> dict:
    figures = check(ticks, spec, model)
    interval = spec.scrape_interval_seconds
    needed = [_clamp(math.ceil(k.rate / model.replica_rate), spec) for k in ticks]
    waits_sorted = sorted(waits)
    figures.update({
        "requests_served": len(waits),
        "queue_wait_mean_s": round(sum(waits) / len(waits), 2) if waits else 0.0,
        "queue_wait_p99_s": waits_sorted[int(0.99 * (len(waits_sorted) - 1))] if waits else 0.0,
        "peak_waiting": max(k.waiting for k in ticks),
        "replica_seconds": sum(k.replicas for k in ticks) * interval,
        "replica_seconds_needed": sum(needed) * interval,
        "unanswered_scrapes": sum(k.observed_waiting is None for k in ticks),
    })
    return figures


def _clamp(n: int, spec: AutoscalingSpec) -> int:
    return min(max(n, spec.min_replicas), spec.max_replicas)


def plot(ticks: list[Tick], path: pathlib.Path, model: FleetModel = FleetModel(),
         spec: AutoscalingSpec = SPEC) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [k.time / 60 for k in ticks]
    fig, (load, reps, queue) = plt.subplots(3, 1, sharex=True, figsize=(10, 8))
    load.plot(t, [k.rate for k in ticks], label="arrivals (req/s)")
    load.plot(t, [k.ready * model.replica_rate for k in ticks], label="ready capacity (req/s)")
    load.set_ylabel("req/s")
    load.legend(loc="upper right")
    reps.step(t, [k.replicas for k in ticks], where="post", label="spec.replicas")
    reps.step(t, [k.ready for k in ticks], where="post", label="ready")
    reps.step(t, [_clamp(math.ceil(k.rate / model.replica_rate), spec) for k in ticks],
              where="post", linestyle=":", label="needed for arrivals")
    reps.axhline(spec.max_replicas, color="grey", linewidth=0.5)
    reps.set_ylabel("replicas")
    reps.legend(loc="upper right")
    queue.plot(t, [k.waiting for k in ticks], label="waiting")
    queue.plot(t, [k.running for k in ticks], label="running")
    queue.set_ylabel("requests")
    queue.set_xlabel("minutes")
    queue.legend(loc="upper right")
    for ax in (load, reps, queue):
        for p in PROFILE:
            ax.axvline(p.start / 60, color="grey", linewidth=0.3)
    load.set_title("Queue-depth autoscaling: ramp, spike, plateau, idle "
                   f"(target {spec.target_queue_depth:g} waiting/replica)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results",
                        help="folder for autoscaling_trace.png and autoscaling_summary.json")
    args = parser.parse_args(argv)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ticks, waits = simulate()
    figures = summarize(ticks, waits)
    plot(ticks, out / "autoscaling_trace.png")
    record = {"command": "python -m kubellm.operator.autoscaling.simulate",
              "spec": dataclasses.asdict(SPEC), "fleet": dataclasses.asdict(FleetModel()),
              "profile": [dataclasses.asdict(p) for p in PROFILE], "figures": figures}
    (out / "autoscaling_summary.json").write_text(json.dumps(record, indent=2) + "\n")
    for key, value in figures.items():
        print(f"{key:28s} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
