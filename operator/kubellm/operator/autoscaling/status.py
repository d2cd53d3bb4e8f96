"""The autoscaler's part of the LLMDeployment status, as merge-patch fragments.

``status.conditions`` is shared with the operator's Ready/Progressing/Degraded; a merge
patch replaces a list whole, so we write the list back with only ScalingActive changed,
rebuilt (``rebased``) on the list as the server holds it at write time, never on the
possibly stale copy the fragment was computed from.
"""
from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from kubellm.operator.autoscaling.history import MetricHistory
from kubellm.operator.autoscaling.policy import Decision

CONDITION = "ScalingActive"
# Reasons under which the autoscaler is not acting on metrics (condition False).
INACTIVE_REASONS = {"MetricsUnavailable", "AutoscalingDisabled", "InvalidSpec",
                    "SelectorUnknown", "KedaUnavailable"}


def rfc3339(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def with_condition(conditions: Sequence[Mapping[str, Any]] | None, reason: str,
                   message: str, now: float) -> list[dict[str, Any]]:
    """``conditions`` with ScalingActive set; lastTransitionTime moves only on a flip."""
    status = "False" if reason in INACTIVE_REASONS else "True"
    others = [dict(c) for c in conditions or () if c.get("type") != CONDITION]
    old = next((c for c in conditions or () if c.get("type") == CONDITION), None)
    since = old.get("lastTransitionTime") if old and old.get("status") == status else None
    return others + [{"type": CONDITION, "status": status, "reason": reason,
                      "message": message, "lastTransitionTime": since or rfc3339(now)}]


def rebased(fragment: Mapping[str, Any], fresh_status: Mapping[str, Any] | None,
            now: float) -> dict[str, Any]:
    """``fragment`` with its conditions list rebuilt on ``fresh_status``'s: ScalingActive
    as the fragment has it, every other writer's condition as the server has it now."""
    ours = next((c for c in fragment.get("conditions") or () if c.get("type") == CONDITION),
                None)
    if ours is None:
        return dict(fragment)
    return {**fragment, "conditions": with_condition(
        (fresh_status or {}).get("conditions"), ours["reason"], ours["message"], now)}


def condition_reason(status: Mapping[str, Any] | None) -> str | None:
    for c in (status or {}).get("conditions") or ():
        if c.get("type") == CONDITION:
            return c.get("reason")
    return None


def decision_patch(status: Mapping[str, Any] | None, decision: Decision,
                   history: MetricHistory, now: float) -> dict[str, Any]:
    status = status or {}
    patch: dict[str, Any] = {
        "desiredReplicas": decision.replicas,
        "conditions": with_condition(status.get("conditions"), decision.reason,
                                     decision.message, now),
        "autoscaler": history.to_status() | {"mode": "operator"},
    }
    if decision.queue_depth is not None:
        patch["queueDepth"] = round(decision.queue_depth, 2)
    if decision.direction:
        patch["lastScaleTime"] = rfc3339(now)
    return patch


def condition_patch(status: Mapping[str, Any] | None, reason: str, message: str,
                    now: float, mode: str | None = None) -> dict[str, Any]:
    patch: dict[str, Any] = {"conditions": with_condition(
        (status or {}).get("conditions"), reason, message, now)}
    if mode is not None:
        patch["autoscaler"] = {"mode": mode}
    return patch
