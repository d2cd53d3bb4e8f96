"""Kubernetes Events about an LLMDeployment (what `kubectl describe llmd` shows)."""
from __future__ import annotations

import datetime
import uuid
from typing import Any

from kubellm.operator.kube import KubeClient
from kubellm.operator.resources import FIELD_MANAGER, resource_path


def build_event(owner: dict[str, Any], type_: str, reason: str, message: str,
                now: datetime.datetime) -> dict[str, Any]:
    meta = owner["metadata"]
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1", "kind": "Event",
        # A unique name: event names must not collide, even on servers without generateName.
        "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:12]}",
                     "namespace": meta["namespace"]},
        "involvedObject": {"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                           "name": meta["name"], "namespace": meta["namespace"],
                           "uid": meta["uid"]},
        "type": type_, "reason": reason, "message": message[:1024],
        "source": {"component": FIELD_MANAGER},
        "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
    }


async def post_event(client: KubeClient, owner: dict[str, Any], type_: str, reason: str,
                     message: str) -> None:
    now = datetime.datetime.now(datetime.timezone.utc)
    event = build_event(owner, type_, reason, message, now)
    await client.create(resource_path("v1", "Event", owner["metadata"]["namespace"]), event)
