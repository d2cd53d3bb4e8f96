"""LLMDeployment status from its children: pure functions, then one merge patch.

The operator owns phase, replicas, readyReplicas, selector, endpoint, model,
observedGeneration and the Ready/Progressing/Degraded conditions. Everything else in
status (the autoscaler's queueDepth, desiredReplicas, lastScaleTime, autoscaler, and
its ScalingActive condition) is left exactly as it is.
"""
from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from kubellm.operator.builders.children import Topology

OWN_CONDITIONS = ("Ready", "Progressing", "Degraded", "ModelCached", "Routing")
NO_SPARE_GPU_HINT = ("the old pods keep serving until it starts; spec.rollout.maxUnavailable: "
                     "1 with maxSurge: 0 would replace them in place instead (an outage with "
                     "one replica)")


@dataclass(frozen=True)
class Observed:
    replicas: int  # replicas (pods or pod groups) that exist
    ready_replicas: int  # replicas that serve traffic
    rollout_done: bool  # every replica runs the latest template


def _rollout_done(workload: dict[str, Any], desired: int) -> bool:
    status = workload.get("status") or {}
    generation = workload.get("metadata", {}).get("generation")
    seen = status.get("observedGeneration")
    current = generation is None or seen is None or seen >= generation
    return current and status.get("updatedReplicas", 0) >= desired \
        and status.get("replicas", 0) <= desired


def group_serving(group: dict[str, Any], size: int) -> bool:
    """Whether a multi-node group's StatefulSet runs its latest template, all ranks ready."""
    return _rollout_done(group, size) and \
        (group.get("status") or {}).get("readyReplicas", 0) >= size


def observe(topo: Topology, spec: dict[str, Any], workloads: list[dict[str, Any]]) -> Observed:
    """Summarise the Deployment / LeaderWorkerSet / group StatefulSets that exist."""
    if topo is Topology.STATEFUL_SETS:
        size = spec["parallelism"]["pipeline"]
        ready = sum(1 for w in workloads
                    if (w.get("status") or {}).get("readyReplicas", 0) >= size)
        done = all(_rollout_done(w, size) for w in workloads)
        return Observed(len(workloads), ready, done and len(workloads) == spec["replicas"])
    if not workloads:
        return Observed(0, 0, False)
    status = workloads[0].get("status") or {}
    return Observed(status.get("replicas", 0), status.get("readyReplicas", 0),
                    _rollout_done(workloads[0], spec["replicas"]))


def _condition(type_: str, ok: bool, reason: str, message: str) -> dict[str, Any]:
    return {"type": type_, "status": "True" if ok else "False", "reason": reason,
            "message": message}


def unschedulable_message(pods: list[dict[str, Any]]) -> str | None:
    """Why the first Pending pod the scheduler refused waits (its own message)."""
    for pod in sorted(pods, key=lambda p: p["metadata"].get("name", "")):
        status = pod.get("status") or {}
        if pod["metadata"].get("deletionTimestamp") or status.get("phase") != "Pending":
            continue
        for cond in status.get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False" \
                    and cond.get("reason") == "Unschedulable":
                return (f"pod {pod['metadata']['name']} is Pending: "
                        f"{cond.get('message') or 'no node fits it'}")
    return None


def healthy_status(cr: dict[str, Any], spec: dict[str, Any], observed: Observed, *,
                   selector: str, endpoint: str, model: str,
                   extra_conditions: tuple[dict[str, Any], ...] = (),
                   waiting: tuple[str, str] | None = None,
                   unschedulable: str | None = None) -> dict[str, Any]:
    """``waiting``: (reason, message) of what holds the rollout back (the model cache);
    ``unschedulable``: the scheduler's word on a Pending pod of this LLMDeployment."""
    desired = spec["replicas"]
    ready = observed.ready_replicas
    counts = f"{ready}/{desired} replicas ready"
    is_ready = desired > 0 and ready >= desired
    progressing = not observed.rollout_done or ready < desired or waiting is not None
    if desired == 0:
        phase, ready_reason = "Pending", "ScaledToZero"
    else:
        phase = "Ready" if is_ready and not progressing else "Progressing"
        ready_reason = "ReplicasReady" if is_ready else "ReplicasNotReady"
    if waiting is not None:
        progress = _condition("Progressing", True, waiting[0], f"{counts}; {waiting[1]}")
    elif progressing and unschedulable:
        hint = f"; {NO_SPARE_GPU_HINT}" if ready > 0 else ""
        progress = _condition("Progressing", True, "PodsUnschedulable",
                              f"{counts}; {unschedulable}{hint}")
    else:
        progress = _condition("Progressing", progressing,
                              "RollingOut" if progressing else "RolloutComplete", counts)
    return {
        "phase": phase, "replicas": observed.replicas, "readyReplicas": ready,
        "selector": selector, "endpoint": endpoint, "model": model,
        "observedGeneration": cr["metadata"].get("generation"),
        "conditions": [
            _condition("Ready", is_ready, ready_reason, counts),
            progress,
            _condition("Degraded", False, "ReconcileSucceeded", "children match the spec"),
            *extra_conditions,
        ],
    }


def with_degraded(mine: dict[str, Any], reason: str, message: str) -> dict[str, Any]:
    """``mine`` (a healthy status: replicas as observed, e.g. old pods still serving) turned
    Degraded for a problem that blocks only part of the spec (the model cache's loader)."""
    conditions = [c for c in mine["conditions"] if c["type"] != "Degraded"]
    return {**mine, "phase": "Degraded",
            "conditions": [_condition("Degraded", True, reason, message), *conditions]}


def degraded_status(cr: dict[str, Any], reason: str, message: str,
                    extra_conditions: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    """Status for a spec the operator cannot act on; replica counts stay as they were."""
    return {
        "phase": "Degraded",
        "observedGeneration": cr["metadata"].get("generation"),
        "conditions": [
            _condition("Degraded", True, reason, message),
            _condition("Progressing", False, reason,
                       "blocked until the problem the Degraded condition names is fixed"),
            _condition("Ready", False, reason, message),
            *extra_conditions,
        ],
    }


def merge_conditions(existing: list[dict[str, Any]], mine: list[dict[str, Any]],
                     generation: int | None, now: datetime.datetime) -> list[dict[str, Any]]:
    """Replace our condition types, keep others'; transition time moves only on change."""
    previous = {c.get("type"): c for c in existing}
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    merged = [c for c in existing if c.get("type") not in OWN_CONDITIONS]
    for cond in mine:
        old = previous.get(cond["type"])
        same = old is not None and old.get("status") == cond["status"]
        cond = {**cond, "lastTransitionTime": old.get("lastTransitionTime", stamp)
                if same else stamp}
        if generation is not None:
            cond["observedGeneration"] = generation
        merged.append(cond)
    return sorted(merged, key=lambda c: c.get("type", ""))


def status_patch(current: dict[str, Any], mine: dict[str, Any],
                 now: datetime.datetime) -> dict[str, Any] | None:
    """The merge patch for .status, or None when nothing of ours changed."""
    fields = {k: v for k, v in mine.items() if k != "conditions"}
    conditions = merge_conditions(current.get("conditions") or [], mine["conditions"],
                                  mine.get("observedGeneration"), now)
    changed = {k: v for k, v in fields.items() if current.get(k) != v}
    if conditions != (current.get("conditions") or []):
        changed["conditions"] = conditions
    return changed or None


def condition(status: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c.get("type") == type_), None)
