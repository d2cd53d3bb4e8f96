"""The metric window: one sample per scrape, kept on the object in status.autoscaler.

Kept on the LLMDeployment (not only in the operator's memory) so that a restarted
operator resumes with the same window: it neither forgets a recent spike and scales
down at once, nor acts on an empty window.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from kubellm.operator.autoscaling.config import AutoscalingSpec


@dataclasses.dataclass(frozen=True, slots=True)
class Sample:
    """One scrape of the fleet. Pods that did not answer are in num_ready only."""
    time: float                      # unix seconds
    waiting: float                   # sum of vllm:num_requests_waiting over answering pods
    running: float                   # sum of vllm:num_requests_running over answering pods
    num_answered: int
    num_ready: int
    replicas: int = 0                # spec.replicas when scraped (ready or still starting)
    # Mean running count of the answering pods that had a queue: a pod only queues
    # when it runs all it can, so this is what one replica can run at once.
    saturated_running: float | None = None
    # Requests the activator holds while no replica is ready (scale from zero); None when
    # there is no activator or it did not answer.
    held: float | None = None

    def __post_init__(self) -> None:
        if self.num_answered < 0 or self.num_ready < self.num_answered:
            raise ValueError(f"Sample needs 0 <= num_answered ({self.num_answered}) <= "
                             f"num_ready ({self.num_ready})")
        if self.replicas < 0:
            raise ValueError(f"Sample needs replicas >= 0, got {self.replicas}")
        if self.waiting < 0 or self.running < 0:
            raise ValueError(f"Sample needs waiting ({self.waiting}) and running "
                             f"({self.running}) >= 0")

    @property
    def is_known(self) -> bool:
        return self.num_answered > 0 or self.held is not None

    @property
    def fleet_waiting(self) -> float:
        """Waiting requests of the whole fleet (a silent pod counts as the average pod),
        with the ones the activator holds."""
        pods = self.waiting / self.num_answered * self.num_ready if self.num_answered else 0.0
        return pods + (self.held or 0.0)

    @property
    def fleet_running(self) -> float:
        return self.running / self.num_answered * self.num_ready if self.num_answered else 0.0

    @property
    def is_idle(self) -> bool:
        return self.is_known and self.fleet_waiting == 0 and self.fleet_running == 0

    def to_json(self) -> list[Any]:
        # A list, not a dict: the window lives in status, so keep it compact.
        return [round(self.time, 3), self.waiting, self.running, self.num_answered,
                self.num_ready, self.replicas, self.saturated_running, self.held]

    @classmethod
    def from_json(cls, row: Any) -> Sample:
        time, waiting, running, answered, ready, replicas, saturated, *rest = row
        held = rest[0] if rest else None  # rows written before scale from zero have 7
        return cls(float(time), float(waiting), float(running), int(answered), int(ready),
                   int(replicas), None if saturated is None else float(saturated),
                   None if held is None else float(held))


@dataclasses.dataclass(frozen=True, slots=True)
class MetricHistory:
    samples: tuple[Sample, ...] = ()
    # Largest saturated_running seen: how many requests one replica runs at once. Kept
    # beyond the window because a fleet that stopped queueing still needs it to judge
    # how many replicas its running requests occupy.
    running_capacity: float | None = None
    # What the capacity was learned for (engine/parallelism/model): new pods of another
    # shape run a different number of requests at once, so the capacity is relearned.
    capacity_key: str | None = None

    def for_capacity_key(self, key: str) -> MetricHistory:
        if key == self.capacity_key:
            return self
        return MetricHistory(self.samples, None, key)

    def record(self, sample: Sample, spec: AutoscalingSpec) -> MetricHistory:
        """Append a sample and drop those no window of ``spec`` will look at again."""
        horizon = sample.time - spec.retention_seconds
        kept = tuple(s for s in self.samples if horizon <= s.time < sample.time)
        capacity = self.running_capacity
        if sample.saturated_running is not None:
            capacity = max(capacity or 0.0, sample.saturated_running)
        return MetricHistory(kept + (sample,), capacity, self.capacity_key)

    def to_status(self) -> dict[str, Any]:
        return {"samples": [s.to_json() for s in self.samples],
                "runningCapacity": self.running_capacity, "capacityKey": self.capacity_key}

    @classmethod
    def from_status(cls, state: Mapping[str, Any] | None) -> MetricHistory:
        """Restore from status.autoscaler; a damaged entry starts an empty window."""
        state = state or {}
        try:
            samples = tuple(Sample.from_json(row) for row in state.get("samples") or ())
            capacity = state.get("runningCapacity")
            capacity = None if capacity is None else float(capacity)
            key = state.get("capacityKey")
            key = None if key is None else str(key)
        except (TypeError, ValueError):
            return cls()
        return cls(tuple(sorted(samples, key=lambda s: s.time)), capacity, key)
