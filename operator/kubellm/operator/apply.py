"""Idempotent create-or-patch of children, drift detection and pruning."""
from __future__ import annotations

from typing import Any

from kubellm.operator.builders.meta import INSTANCE_LABEL, MANAGED_BY_LABEL, MANAGER, is_owned_by
from kubellm.operator.ownership import NameConflict, is_controlled_by
from kubellm.operator.kube import KubeClient
from kubellm.operator.resources import manifest_path, resource_path

# Kinds an LLMDeployment may own, with their API versions.
CHILD_KINDS = (("apps/v1", "Deployment"), ("apps/v1", "StatefulSet"), ("v1", "Service"),
               ("networking.k8s.io/v1", "NetworkPolicy"), ("policy/v1", "PodDisruptionBudget"))
LWS_KIND = ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")
# The Endpoint Picker's kinds (spec.routing), and the InferencePool when its CRD is served.
ROUTING_KINDS = (("v1", "ConfigMap"), ("v1", "ServiceAccount"),
                 ("rbac.authorization.k8s.io/v1", "Role"),
                 ("rbac.authorization.k8s.io/v1", "RoleBinding"))
POOL_KIND = ("inference.networking.k8s.io/v1", "InferencePool")


def is_subset(desired: Any, actual: Any) -> bool:
    """Whether ``actual`` already holds every value of ``desired``.

    The server adds defaults (extra keys) but never changes what we set; any difference
    in what we set is drift: a hand edit, or a spec change not yet applied.
    """
    if isinstance(desired, dict):
        return isinstance(actual, dict) and all(
            key in actual and is_subset(value, actual[key]) for key, value in desired.items())
    if isinstance(desired, list):
        return (isinstance(actual, list) and len(desired) == len(actual)
                and all(is_subset(d, a) for d, a in zip(desired, actual)))
    return desired == actual


async def ensure_child(client: KubeClient, desired: dict[str, Any]) -> str:
    """Make the child match ``desired``: 'created', 'patched' or 'unchanged'.

    Raises NameConflict, changing nothing, when an object of that name exists without
    our controller reference: a user's object is never taken over (on a real server the
    patch of a Deployment's immutable selector would fail anyway, and deleting the
    LLMDeployment would garbage-collect what we adopted)."""
    path = manifest_path(desired)
    actual = await client.get(path)
    if actual is None:
        meta = desired["metadata"]
        await client.create(resource_path(desired["apiVersion"], desired["kind"],
                                          meta["namespace"]), desired)
        return "created"
    owner_uid = desired["metadata"]["ownerReferences"][0]["uid"]
    if not is_controlled_by(actual, owner_uid):
        raise NameConflict(desired)
    if is_subset(desired, actual):
        return "unchanged"
    await client.apply(path, desired)
    return "patched"


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


async def owned_children(client: KubeClient, owner: dict[str, Any],
                         kinds: tuple[tuple[str, str], ...]) -> list[dict[str, Any]]:
    meta = owner["metadata"]
    selector = f"{INSTANCE_LABEL}={meta['name']},{MANAGED_BY_LABEL}={MANAGER}"
    found = []
    for api_version, kind in kinds:
        items = await client.list(resource_path(api_version, kind, meta["namespace"]), selector)
        for item in items:
            # Servers that ignore labelSelector (and stale objects) are filtered here.
            if is_owned_by(item, meta["uid"]):
                found.append({"apiVersion": api_version, "kind": kind, **item})
    return found


async def prune_children(client: KubeClient, owner: dict[str, Any],
                         desired: list[dict[str, Any]],
                         kinds: tuple[tuple[str, str], ...]) -> list[tuple[str, str]]:
    """Delete owned children that ``desired`` no longer lists; returns their (kind, name)."""
    keep = {_key(child) for child in desired}
    pruned = []
    for child in await owned_children(client, owner, kinds):
        if _key(child) not in keep:
            await client.delete(manifest_path(child))
            pruned.append(_key(child))
    return pruned
