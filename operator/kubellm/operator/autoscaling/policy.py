"""The scaling policy: a pure function of the metric history and the spec.

    decide(history, spec, current_replicas, last_scale_time, now) -> Decision

Demand at time t (from the samples in the metrics window ending at t):
  * queue:   ceil(waiting / targetQueueDepth), where waiting is the larger of the window
             average and the newest sample, so a sudden queue acts at once while a
             falling one must fall in the whole window. Replicas asked for but not
             ready yet (or ready only since the previous scrape) will each take
             `capacity` requests off the queue; those count as running, not waiting
             (else a queue that grows while pods start keeps adding replicas);
  * running: when requests run, the replicas they occupy, ceil(running / capacity),
             capacity being what one replica was seen to run while it queued. It never
             asks for more than the current replicas: it only stops a busy fleet that
             keeps up (nothing waits) from being scaled down. Capacity not yet seen ->
             the fleet stays as it is while anything runs.
The recommendation is max(queue, running) clamped to [minReplicas, maxReplicas].
Stabilization as the HPA does it: scale up to the smallest recommendation of the last
scaleUpStabilizationSeconds (bounded by maxScaleUpStep), down to the largest of the last
scaleDownStabilizationSeconds, and down only once the history covers that window and the
last scale is a metrics window ago (before that the window still describes the fleet as
it was before the scale). Samples with no answering pod are ignored; a window
without any holds the replicas. With minReplicas 0 the last replica goes only after
scaleToZeroAfterSeconds in which no sample saw a request waiting, running or held by the
activator; held requests (the activator's, while no replica is ready) count as waiting,
so the first request of an idle LLMDeployment asks for a replica.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from kubellm.operator.autoscaling.config import AutoscalingSpec
from kubellm.operator.autoscaling.history import MetricHistory, Sample

_EPS = 1e-9  # so that 16.000000001 waiting / 8 still asks for 2 replicas


@dataclasses.dataclass(frozen=True, slots=True)
class Demand:
    waiting: float        # fleet waiting requests the queue signal uses
    running: float        # fleet running requests
    by_queue: int
    by_running: int

    @property
    def replicas(self) -> int:
        return max(self.by_queue, self.by_running)


@dataclasses.dataclass(frozen=True, slots=True)
class Decision:
    current: int
    replicas: int                  # what spec.replicas should be; == current to hold
    reason: str                    # CamelCase, becomes the ScalingActive reason
    message: str
    recommended: int | None = None  # demand now, clamped, before stabilization and steps
    queue_depth: float | None = None  # window-average fleet waiting requests

    @property
    def direction(self) -> int:
        return (self.replicas > self.current) - (self.replicas < self.current)


def demand_at(samples: Sequence[Sample], t: float, spec: AutoscalingSpec,
              capacity: float | None) -> Demand | None:
    """Demand from the known samples in the window (t - metricsWindowSeconds, t].

    Uses the replicas recorded in the newest sample, not today's: the demand of a past
    tick must come out as it did then, for the stabilization windows.
    """
    window = [s for s in samples
              if t - spec.metrics_window_seconds < s.time <= t and s.is_known]
    if not window:
        return None
    newest = window[-1]
    current = newest.replicas
    waiting = max(_mean(s.fleet_waiting for s in window), newest.fleet_waiting)
    running = max(_mean(s.fleet_running for s in window), newest.fleet_running)
    if capacity:
        # A pod that turned ready since the last scrape has not taken its share yet.
        settled = min(s.num_ready for s in window[-2:])
        starting = max(0, current - settled)
        taken = min(waiting, starting * capacity)
        waiting, running = waiting - taken, running + taken
    by_queue = _ceil(waiting / spec.target_queue_depth)
    if running <= 0:
        by_running = 0
    elif capacity:
        by_running = min(_ceil(running / capacity), current)
    else:
        by_running = current
    return Demand(waiting, running, by_queue, by_running)


def decide(history: MetricHistory, spec: AutoscalingSpec, current_replicas: int,
           last_scale_time: float | None, now: float) -> Decision:
    current = current_replicas
    low, high = spec.min_replicas, spec.max_replicas
    if current < low:
        return Decision(current, low, "BelowMinReplicas",
                        f"spec.replicas {current} < minReplicas {low}; scaling to {low}")
    if current > high:
        return Decision(current, high, "AboveMaxReplicas",
                        f"spec.replicas {current} > maxReplicas {high}; scaling to {high}")

    samples = sorted((s for s in history.samples if s.time <= now), key=lambda s: s.time)
    capacity = history.running_capacity
    demand = demand_at(samples, now, spec, capacity)
    if demand is None:
        return Decision(current, current, "MetricsUnavailable",
                        f"no pod answered on /metrics in the last "
                        f"{spec.metrics_window_seconds:g}s; holding {current} replicas")
    recommended = _clamp(demand.replicas, low, high)
    queue_depth = _mean(s.fleet_waiting for s in samples
                        if now - spec.metrics_window_seconds < s.time and s.is_known)
    seen = (f"{demand.waiting:.1f} waiting (target {spec.target_queue_depth:g} per "
            f"replica), {demand.running:.1f} running")

    def decision(replicas: int, reason: str, message: str) -> Decision:
        return Decision(current, replicas, reason, f"{seen}; {message}",
                        recommended, queue_depth)

    # Recommendations at every sample time and now, for the stabilization windows.
    recommendations = [(now, recommended)]
    for s in samples:
        past = demand_at(samples, s.time, spec, capacity)
        if past is not None and s.time < now:
            recommendations.append((s.time, _clamp(past.replicas, low, high)))

    up = min(r for t, r in recommendations if t > now - spec.scale_up_stabilization_seconds
             or t == now)
    if up > current:
        target = min(up, current + spec.max_scale_up_step)
        limited = " (step limit)" if target < up else ""
        return decision(target, "ScaledUp", f"scaling up {current} -> {target}{limited}")
    if recommended > current:
        return decision(current, "ScaleUpStabilizing",
                        f"{recommended} replicas wanted, waiting for "
                        f"{spec.scale_up_stabilization_seconds:g}s of it")
    if demand.replicas > high:
        return decision(current, "AtMaxReplicas",
                        f"{demand.replicas} replicas wanted, maxReplicas is {high}")

    down = max(r for t, r in recommendations
               if t > now - spec.scale_down_stabilization_seconds or t == now)
    if down == 0 < current:
        idle_for = _idle_seconds(samples, now)
        if idle_for < spec.scale_to_zero_after_seconds:
            if current == 1:
                return decision(current, "ScaleToZeroPending",
                                f"no demand for {idle_for:.0f}s; the last replica goes "
                                f"after {spec.scale_to_zero_after_seconds:g}s without any")
            down = 1  # down to one replica now, to zero once idle long enough
    if down < current:
        window = spec.scale_down_stabilization_seconds
        observed = now - samples[0].time
        since_scale = math.inf if last_scale_time is None else now - last_scale_time
        if observed < window:
            return decision(current, "ScaleDownStabilizing",
                            f"{down} replicas would do; {observed:.0f}s of the "
                            f"{window:g}s stabilization window observed so far")
        if since_scale < spec.metrics_window_seconds:
            return decision(current, "ScaleDownStabilizing",
                            f"{down} replicas would do; last scale {since_scale:.0f}s ago, "
                            f"waiting for a metrics window of the new fleet")
        return decision(down, "ScaledDown", f"scaling down {current} -> {down}")
    if recommended < current:
        return decision(current, "ScaleDownStabilizing",
                        f"{recommended} replicas would do; the last "
                        f"{spec.scale_down_stabilization_seconds:g}s asked for {down}")
    return decision(current, "WithinTarget", f"holding {current} replicas")


def _idle_seconds(samples: Sequence[Sample], now: float) -> float:
    """How long every sample has shown no request waiting, running or held (a sample
    with no answer is not idle: a fleet we cannot see is not an idle fleet)."""
    busy = [s.time for s in samples if not s.is_idle]
    start = max(busy) if busy else (samples[0].time if samples else now)
    return now - start


def _ceil(x: float) -> int:
    return max(0, math.ceil(x - _EPS))


def _clamp(x: int, low: int, high: int) -> int:
    return min(max(x, low), high)


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0
