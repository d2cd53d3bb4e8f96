"""The autoscaler's Kubernetes API calls, and nothing else (swap the client here).

Requests go through the operator's own Kopf login: ``kopf._cogs.clients.auth``'s
``authenticated`` decorator hands us the aiohttp session and server URL of the
credentials Kopf holds, and re-authenticates on 401 like Kopf's own calls. That is a
private Kopf module (kopf 1.45); if it moves, only this file changes.
"""
from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
from kopf._cogs.clients import auth, errors

from kubellm.operator.ownership import NameConflict, is_controlled_by

GROUP, VERSION, PLURAL = "kubellm.io", "v1alpha1", "llmdeployments"
KEDA_PATH = "/apis/keda.sh/v1alpha1/namespaces/{namespace}/scaledobjects"
TIMEOUT = aiohttp.ClientTimeout(total=10, sock_connect=5)
MERGE_PATCH = "application/merge-patch+json"
STATUS_WRITE_ATTEMPTS = 3  # a concurrent status writer (the operator) costs a retry

NotFound = errors.APINotFoundError
Conflict = errors.APIConflictError
ApiError = errors.APIError


@auth.authenticated
async def _request(method: str, path: str, *, payload: Any = None,
                   params: dict[str, str] | None = None, content_type: str | None = None,
                   context: auth.APIContext | None = None) -> Any:
    if context is None:
        raise RuntimeError("the Kopf credentials were not injected")
    headers = {"Content-Type": content_type} if content_type else None
    url = context.server.rstrip("/") + path
    async with context.session.request(method, url, json=payload, params=params,
                                       headers=headers, timeout=TIMEOUT) as response:
        await errors.check_response(response)
        return await response.json(content_type=None) if response.content_length != 0 else None


def _quote(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def llmd_path(namespace: str, name: str, subresource: str = "") -> str:
    path = (f"/apis/{GROUP}/{VERSION}/namespaces/{_quote(namespace)}/{PLURAL}/"
            f"{_quote(name)}")
    return f"{path}/{subresource}" if subresource else path


async def list_pods(namespace: str, selector: str) -> list[dict[str, Any]]:
    """Pods of the namespace that match a label selector string (status.selector)."""
    body = await _request("GET", f"/api/v1/namespaces/{_quote(namespace)}/pods",
                          params={"labelSelector": selector})
    return list((body or {}).get("items") or [])


async def set_replicas(namespace: str, name: str, replicas: int) -> None:
    """Write spec.replicas through the scale subresource (what `kubectl scale` does)."""
    await _request("PATCH", llmd_path(namespace, name, "scale"),
                   payload={"spec": {"replicas": replicas}},
                   content_type=MERGE_PATCH)


async def patch_status(namespace: str, name: str,
                       build: Callable[[Mapping[str, Any]], Mapping[str, Any]]) -> None:
    """Merge-patch ``build(status as the server has it now)`` into .status.

    The object's resourceVersion goes along as a precondition: if another writer (the
    operator's Ready/Progressing/Degraded) got in between, the server answers 409 and we
    read again and rebuild, so neither writer undoes the other with a stale list.
    """
    for attempt in range(STATUS_WRITE_ATTEMPTS):
        try:
            fresh = await _request("GET", llmd_path(namespace, name)) or {}
        except NotFound:
            return  # deleted meanwhile: nothing to report on
        payload: dict[str, Any] = {"status": dict(build(fresh.get("status") or {}))}
        version = (fresh.get("metadata") or {}).get("resourceVersion")
        if version:
            payload["metadata"] = {"resourceVersion": version}
        try:
            await _request("PATCH", llmd_path(namespace, name, "status"), payload=payload,
                           content_type=MERGE_PATCH)
            return
        except Conflict:
            if attempt == STATUS_WRITE_ATTEMPTS - 1:
                raise


async def apply_scaled_object(obj: dict[str, Any]) -> None:
    """Create the ScaledObject, or merge-patch it to ``obj`` when it exists and is ours;
    NameConflict (nothing changed) when one of that name belongs to someone else."""
    namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    collection = KEDA_PATH.format(namespace=_quote(namespace))
    try:
        await _request("POST", collection, payload=obj)
    except Conflict:
        current = await _request("GET", f"{collection}/{_quote(name)}")
        if not is_controlled_by(current or {}, obj["metadata"]["ownerReferences"][0]["uid"]):
            raise NameConflict(obj) from None
        await _request("PATCH", f"{collection}/{_quote(name)}", payload=obj,
                       content_type=MERGE_PATCH)


async def delete_scaled_object(namespace: str, name: str, owner_uid: str) -> None:
    """Delete our ScaledObject; one of that name that is not ours stays."""
    path = f"{KEDA_PATH.format(namespace=_quote(namespace))}/{_quote(name)}"
    try:
        if is_controlled_by(await _request("GET", path) or {}, owner_uid):
            await _request("DELETE", path)
    except NotFound:
        pass


async def get_scale(namespace: str, name: str) -> dict[str, Any]:
    """The scale subresource: spec.replicas and status.selector, fresh from the server."""
    return await _request("GET", llmd_path(namespace, name, "scale")) or {}
