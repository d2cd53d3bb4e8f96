"""A Deployment rollout in simulated time: the Deployment controller, the scheduler and
the kubelet's probes, driven by a Deployment manifest as the operator builds it.

What it models, after the Kubernetes controllers (pkg/controller/deployment/rolling.go):
- the new ReplicaSet grows while all pods (old + new) stay <= replicas + maxSurge (a
  percentage rounds up), the old ones shrink while available pods stay >= replicas -
  maxUnavailable (rounds down), unavailable old pods going first;
- a pod needs its GPUs free on one node, else it stays Pending (PodScheduled False,
  Unschedulable, with the scheduler's message); GPUs come free when a pod is gone;
- a started container passes its startup probe once the weights are loaded, if that is
  within periodSeconds x failureThreshold (else the kubelet restarts it, forever here),
  then turns Ready at its next readiness probe; a deleted pod leaves the endpoints at
  once and frees its GPUs after its terminationGracePeriodSeconds.
Time advances in one-second ticks; nothing depends on the machine's speed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Pod:
    name: str
    revision: int
    gpus: int
    node: int | None = None
    started: float | None = None
    ready_from: float | None = None  # never, when its startup probe gives up first
    deleted: float | None = None

    def ready(self, now: float) -> bool:
        return (self.deleted is None and self.ready_from is not None
                and now >= self.ready_from)


def _resolve(value: Any, replicas: int, round_up: bool) -> int:
    if isinstance(value, str) and value.endswith("%"):
        exact = int(value[:-1]) * replicas / 100
        return math.ceil(exact) if round_up else math.floor(exact)
    return int(value)


@dataclass
class Rollout:
    deployment: dict[str, Any]
    node_gpus: list[int]  # GPUs of each node
    load_seconds: float  # container start -> weights loaded, /health answers
    now: float = 0.0
    pods: list[Pod] = field(default_factory=list)
    revision: int = 1
    min_ready: int | None = None  # lowest Ready count seen since the rollout began
    max_pods: int = 0  # most pods holding or waiting for GPUs at once

    def __post_init__(self) -> None:
        spec = self.deployment["spec"]
        pod = spec["template"]["spec"]
        container = pod["containers"][0]
        self.replicas = spec["replicas"]
        rolling = spec["strategy"]["rollingUpdate"]
        self.surge = _resolve(rolling["maxSurge"], self.replicas, round_up=True)
        self.unavailable = _resolve(rolling["maxUnavailable"], self.replicas, round_up=False)
        self.gpus = int(container["resources"]["limits"]["nvidia.com/gpu"])
        startup = container["startupProbe"]
        self.startup_budget = startup["periodSeconds"] * startup["failureThreshold"]
        self.readiness_period = container["readinessProbe"]["periodSeconds"]
        self.grace = pod["terminationGracePeriodSeconds"]
        self._count = 0

    # --- the steady state before the rollout -------------------------------------------
    def settle(self) -> None:
        """Run revision 1 until every replica is Ready."""
        for _ in range(100_000):
            self.tick()
            if sum(p.ready(self.now) for p in self.live(1)) == self.replicas:
                return
        raise AssertionError("revision 1 never became ready")

    def roll(self, horizon_seconds: float) -> bool:
        """Change the template and run; True when revision 2 has fully replaced 1."""
        self.revision, self.min_ready = 2, None
        while self.now < horizon_seconds:
            self.tick()
            if self.done():
                return True
        return False

    def done(self) -> bool:
        return (not self.live(1) and len(self.live(2)) == self.replicas
                and all(p.ready(self.now) for p in self.live(2)))

    # --- controllers ---------------------------------------------------------------------
    def live(self, revision: int) -> list[Pod]:
        return [p for p in self.pods if p.revision == revision and p.deleted is None]

    def tick(self) -> None:
        self.now += 1.0
        self._reap()
        self._schedule()
        self._deployment_controller()
        ready = sum(p.ready(self.now) for p in self.pods)
        if self.revision > 1:
            self.min_ready = ready if self.min_ready is None else min(self.min_ready, ready)
        self.max_pods = max(self.max_pods, sum(p.deleted is None for p in self.pods))

    def _deployment_controller(self) -> None:
        new, old = self.live(self.revision), [p for p in self.pods if p.deleted is None
                                              and p.revision != self.revision]
        total = len(new) + len(old)
        grow = min(self.replicas + self.surge - total, self.replicas - len(new))
        for _ in range(max(0, grow)):
            self._count += 1
            self.pods.append(Pod(f"pod-{self._count}", self.revision, self.gpus))
        available = sum(p.ready(self.now) for p in new + old)
        new_unavailable = sum(not p.ready(self.now) for p in new)
        can_remove = (len(new) + len(old)) - (self.replicas - self.unavailable) \
            - new_unavailable
        # Unavailable old pods go first (they serve nothing), then available ones while
        # enough stay available.
        for pod in sorted(old, key=lambda p: p.ready(self.now)):
            if can_remove <= 0:
                break
            if pod.ready(self.now) and available - 1 < self.replicas - self.unavailable:
                break
            available -= pod.ready(self.now)
            pod.deleted = self.now
            can_remove -= 1

    def _free(self, node: int) -> int:
        used = sum(p.gpus for p in self.pods if p.node == node
                   and (p.deleted is None or self.now < p.deleted + self.grace))
        return self.node_gpus[node] - used

    def _schedule(self) -> None:
        for pod in self.pods:
            if pod.node is not None or pod.deleted is not None:
                continue
            fits = [n for n in range(len(self.node_gpus)) if self._free(n) >= pod.gpus]
            if not fits:
                continue
            pod.node, pod.started = fits[0], self.now
            if self.load_seconds <= self.startup_budget:
                probes = math.ceil(self.load_seconds / self.readiness_period)
                pod.ready_from = self.now + probes * self.readiness_period

    def _reap(self) -> None:
        self.pods = [p for p in self.pods
                     if p.deleted is None or self.now < p.deleted + self.grace]

    def pending_pod_objects(self) -> list[dict[str, Any]]:
        """The Pending pods as the API server shows them (for status.py)."""
        free = max((self._free(n) for n in range(len(self.node_gpus))), default=0)
        message = (f"0/{len(self.node_gpus)} nodes are available: {len(self.node_gpus)} "
                   f"Insufficient nvidia.com/gpu (most free: {free}).")
        return [{"metadata": {"name": p.name},
                 "status": {"phase": "Pending", "conditions": [
                     {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                      "message": message}]}}
                for p in self.pods if p.node is None and p.deleted is None]
