"""The autoscaler's Kubernetes API calls, through the operator's one client (kube.py)."""
from __future__ import annotations

from typing import Any

from kubellm.operator.kube import ApiError, KubeClient
from kubellm.operator.ownership import NameConflict, is_controlled_by
from kubellm.operator.resources import llmd_path, manifest_path, resource_path

KEDA_API_VERSION = "keda.sh/v1alpha1"


async def list_pods(client: KubeClient, namespace: str, selector: str) -> list[dict[str, Any]]:
    """Pods of the namespace that match a label selector string (status.selector)."""
    return await client.list(resource_path("v1", "Pod", namespace), selector)


async def get_scale(client: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    """The scale subresource: spec.replicas and status.selector, fresh from the server."""
    return await client.get(llmd_path(namespace, name, "scale")) or {}


async def set_replicas(client: KubeClient, namespace: str, name: str, replicas: int) -> None:
    """Write spec.replicas through the scale subresource (what `kubectl scale` does)."""
    await client.merge_patch(llmd_path(namespace, name, "scale"),
                             {"spec": {"replicas": replicas}})


async def apply_scaled_object(client: KubeClient, obj: dict[str, Any]) -> None:
    """Create the KEDA object (ScaledObject, HTTPScaledObject), or merge-patch it to
    ``obj`` when it exists and is ours; NameConflict (nothing changed) when one of that
    name belongs to someone else. An ApiError 404 means the server does not serve that
    kind (KEDA, or its HTTP add-on, not installed)."""
    current = await client.get(manifest_path(obj))
    if current is None:
        await client.create(resource_path(obj["apiVersion"], obj["kind"],
                                          obj["metadata"]["namespace"]), obj)
        return
    if not is_controlled_by(current, obj["metadata"]["ownerReferences"][0]["uid"]):
        raise NameConflict(obj)
    await client.merge_patch(manifest_path(obj), obj)


async def delete_scaled_object(client: KubeClient, namespace: str, name: str,
                               owner_uid: str, api_version: str = KEDA_API_VERSION,
                               kind: str = "ScaledObject") -> bool:
    """Delete our KEDA object; one of that name that is not ours stays. False when there
    was none of ours (or the kind is not served)."""
    path = resource_path(api_version, kind, namespace, name)
    try:
        current = await client.get(path)
    except ApiError as e:
        if e.status == 404:
            return False
        raise
    if current is not None and is_controlled_by(current, owner_uid):
        await client.delete(path)
        return True
    return False
