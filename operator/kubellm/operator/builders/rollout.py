"""Rollouts without outage, and what keeps pods up through voluntary disruptions.

spec.rollout's maxSurge / maxUnavailable become the Deployment's (and the
LeaderWorkerSet's) rolling update. The defaults (surge 1, unavailable 0) start each new
pod beside the old one, which serves until the new one is Ready: with a spare GPU a
one-replica LLMDeployment never has zero Ready pods. Without one, the surge pod stays
Pending and the old pod keeps serving; status.py says why (the scheduler's message).

A PodDisruptionBudget (maxUnavailable 1) over the pods of an LLMDeployment with more
than one replica keeps node drains from taking several replicas at once. With one
replica there is none: it would block every drain of that node forever.
"""
from __future__ import annotations

from typing import Any

from kubellm.operator.builders.meta import child_metadata, selector_labels
from kubellm.operator.validation import SpecError


def _is_zero(value: Any) -> bool:
    return str(value).strip().rstrip("%") in ("0", "0.0", "")


def rolling_update(spec: dict[str, Any]) -> dict[str, Any]:
    rollout = spec["rollout"]
    surge, unavailable = rollout["maxSurge"], rollout["maxUnavailable"]
    if _is_zero(surge) and _is_zero(unavailable):
        raise SpecError("spec.rollout: maxSurge and maxUnavailable cannot both be 0 (no pod "
                        "could ever be replaced)")
    return {"maxSurge": surge, "maxUnavailable": unavailable}


def deployment_strategy(spec: dict[str, Any]) -> dict[str, Any]:
    return {"type": "RollingUpdate", "rollingUpdate": rolling_update(spec)}


def leader_worker_set_strategy(spec: dict[str, Any]) -> dict[str, Any]:
    # Counted in groups: a surge group needs a whole group's nodes free.
    return {"type": "RollingUpdate", "rollingUpdateConfiguration": rolling_update(spec)}


def wants_disruption_budget(spec: dict[str, Any]) -> bool:
    return spec["replicas"] > 1


def build_disruption_budget(cr: dict[str, Any]) -> dict[str, Any]:
    name = cr["metadata"]["name"]
    return {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": child_metadata(cr, name),
        # Every pod of every replica: evicting any rank of a multi-node group takes the
        # whole group down, so one pod at a time is one replica at a time.
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector_labels(name)},
                 # A pod that never became Ready (Pending, crash-looping) may be evicted
                 # even when the budget is spent: it serves nothing.
                 "unhealthyPodEvictionPolicy": "AlwaysAllow"},
    }
