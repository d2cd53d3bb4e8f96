"""Status of what serves an LLMDeployment besides its replicas: routing and cold starts.

Pure functions the reconciler calls with what it observed:
- ``routing``: the Routing condition and status.routing (spec.routing): the pool and
  Endpoint Picker in place, or why requests reach the pods through the Service only;
- ``cold_start``: status.coldStart, from the scale from zero (replicas 0 -> more) to the
  first Ready replica, whoever scaled (the autoscaler, KEDA, `kubectl scale`).
"""
from __future__ import annotations

import datetime
from typing import Any

from kubellm.operator.builders.routing import POOL_API_VERSION, epp_address, epp_name


def _condition(ok: bool, reason: str, message: str) -> dict[str, Any]:
    return {"type": "Routing", "status": "True" if ok else "False", "reason": reason,
            "message": message}


def routing(cr: dict[str, Any], pool_available: bool,
            epp: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(Routing condition, status.routing) of an LLMDeployment with spec.routing.enabled;
    ``epp``: its Endpoint Picker Deployment as the server has it."""
    name, namespace = cr["metadata"]["name"], cr["metadata"]["namespace"]
    if not pool_available:
        return _condition(False, "InferencePoolUnavailable",
                          f"the API server does not serve {POOL_API_VERSION} InferencePools: "
                          "install the Gateway API Inference Extension's CRDs; requests "
                          f"reach the pods through Service {namespace}/{name} only"), None
    where = {"inferencePool": name, "endpointPicker": epp_address(cr)}
    ready = ((epp or {}).get("status") or {}).get("readyReplicas", 0) >= 1
    if not ready:
        return _condition(False, "EndpointPickerNotReady",
                          f"InferencePool {namespace}/{name} exists; its Endpoint Picker "
                          f"(Deployment {epp_name(name)}) is not ready yet"), where
    return _condition(True, "EndpointPickerReady",
                      f"a gateway routes to InferencePool {namespace}/{name} through the "
                      f"Endpoint Picker at {epp_address(cr)}"), where


def _stamp(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(value: Any) -> datetime.datetime | None:
    try:
        return datetime.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def cold_start(current: dict[str, Any], desired: int, ready: int,
               now: datetime.datetime) -> tuple[dict[str, Any] | None, float | None]:
    """(status.coldStart to write or None for no change, seconds of a cold start that just
    ended). It starts when replicas are asked for while none existed (the last status
    said 0), and ends at the first Ready replica."""
    previous = dict(current.get("coldStart") or {})
    started = _parse(previous.get("startedAt")) if previous.get("startedAt") else None
    if started is None:
        if desired >= 1 and ready == 0 and current.get("replicas") == 0:
            return {**previous, "startedAt": _stamp(now)}, None
        return None, None
    if ready >= 1:
        seconds = max(0.0, (now - started).total_seconds())
        return {"startedAt": None, "lastSeconds": round(seconds, 1),
                "lastReadyAt": _stamp(now)}, seconds
    if desired == 0:  # scaled back to zero before any replica came up
        return {**previous, "startedAt": None}, None
    return None, None
