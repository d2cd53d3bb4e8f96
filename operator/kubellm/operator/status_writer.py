"""The one way the operator writes an LLMDeployment's .status.

Two writers share .status: the reconciler (phase, replicas, Ready/Progressing/Degraded)
and the autoscaler (queueDepth, desiredReplicas, ScalingActive). Each builds its patch
from the status as the server has it now and sends it with that resourceVersion as a
precondition; a concurrent write makes the server answer 409, and we read and rebuild,
so neither writer undoes the other with a stale conditions list.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kubellm.operator.kube import ApiError, KubeClient
from kubellm.operator.resources import llmd_path

ATTEMPTS = 3  # a concurrent writer costs a retry

# current status -> the merge patch for .status, or None when nothing changes
BuildPatch = Callable[[Mapping[str, Any]], "Mapping[str, Any] | None"]


async def write_status(client: KubeClient, namespace: str, name: str,
                       build: BuildPatch) -> dict[str, Any]:
    """Merge-patch ``build(current status)``; returns the status the patch was built on
    ({} when the object is gone)."""
    for attempt in range(ATTEMPTS):
        fresh = await client.get(llmd_path(namespace, name))
        if fresh is None:
            return {}
        current = fresh.get("status") or {}
        patch = build(current)
        if not patch:
            return current
        body: dict[str, Any] = {"status": dict(patch)}
        version = fresh["metadata"].get("resourceVersion")
        if version:  # lists are replaced whole: fail on a concurrent write
            body["metadata"] = {"resourceVersion": version}
        try:
            await client.merge_patch(llmd_path(namespace, name, "status"), body)
            return current
        except ApiError as e:
            if e.status != 409 or attempt == ATTEMPTS - 1:
                raise
    return {}
