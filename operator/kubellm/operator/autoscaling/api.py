"""The autoscaler's Kubernetes API calls, through the operator's one client (kube.py)."""
from __future__ import annotations

from typing import Any

from kubellm.operator.kube import KubeClient
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
    """Create the ScaledObject, or merge-patch it to ``obj`` when it exists and is ours;
    NameConflict (nothing changed) when one of that name belongs to someone else. An
    ApiError 404 means the server serves no ScaledObjects (KEDA not installed)."""
    current = await client.get(manifest_path(obj))
    if current is None:
        await client.create(resource_path(KEDA_API_VERSION, "ScaledObject",
                                          obj["metadata"]["namespace"]), obj)
        return
    if not is_controlled_by(current, obj["metadata"]["ownerReferences"][0]["uid"]):
        raise NameConflict(obj)
    await client.merge_patch(manifest_path(obj), obj)


async def delete_scaled_object(client: KubeClient, namespace: str, name: str,
                               owner_uid: str) -> None:
    """Delete our ScaledObject; one of that name that is not ours stays."""
    path = resource_path(KEDA_API_VERSION, "ScaledObject", namespace, name)
    current = await client.get(path)
    if current is not None and is_controlled_by(current, owner_uid):
        await client.delete(path)
