"""The operator's Kubernetes API client: kubernetes_asyncio's ApiClient, on Kopf's login.

One client for every call the operator makes itself (the reconciler's children, status
and Events; the autoscaler's scale, pods and ScaledObjects). kubernetes_asyncio does the
transport, TLS, serialization and error mapping; we hand it the credentials Kopf
resolved (kopf.ConnectionInfo: in-cluster service account or kubeconfig), so the
operator and Kopf talk to the same server as the same user, and re-login reaches both.

Calls take API paths (``resources.resource_path``): the operator works on plain dict
manifests of several groups, CRDs of other projects among them, for which the generated
typed APIs have no models.
"""
from __future__ import annotations

import asyncio
import base64
import tempfile
from typing import Any

from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.client.exceptions import ApiException

from kubellm.operator.resources import FIELD_MANAGER

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
TIMEOUT_SECONDS = 30
RETIRE_SECONDS = 2 * TIMEOUT_SECONDS  # a replaced client outlives its last call
# Every success status a call can answer with, decoded as plain JSON.
_AS_OBJECT = {status: "object" for status in (200, 201, 202)}


class ApiError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


def _message(exc: ApiException) -> str:
    import json

    try:
        return json.loads(exc.body).get("message") or exc.reason
    except (TypeError, ValueError, AttributeError):
        return str(exc.body or exc.reason)


def _file(path: str | None, data: str | None) -> str | None:
    """A path for PEM material given as a path or as base64 kubeconfig data.

    The TLS stack only reads files: data goes to an owner-only (0600) temporary file, kept
    for the process's life as the SSL context may reload it."""
    if path or not data:
        return path
    f = tempfile.NamedTemporaryFile(prefix="kubellm-", delete=False)
    f.write(base64.b64decode(data))
    f.close()
    return f.name


def configuration(info: Any) -> Configuration:
    config = Configuration(host=info.server.rstrip("/"))
    config.verify_ssl = not info.insecure
    config.ssl_ca_cert = _file(info.ca_path, info.ca_data)
    config.cert_file = _file(info.certificate_path, info.certificate_data)
    config.key_file = _file(info.private_key_path, info.private_key_data)
    return config


class KubeClient:
    def __init__(self, info: Any):
        self._api: ApiClient | None = None
        self.update_credentials(info)

    def update_credentials(self, info: Any) -> None:
        """Use new credentials (Kopf logs in again when a token expires)."""
        old, self._api = self._api, ApiClient(configuration(info))
        for name, value in info.as_http_headers().items():
            self._api.set_default_header(name, value)
        if old is not None:  # calls in flight may still use it: close it a little later
            loop = asyncio.get_running_loop()
            loop.call_later(RETIRE_SECONDS, lambda: loop.create_task(old.close()))

    async def close(self) -> None:
        if self._api is not None:
            await self._api.close()

    async def _call(self, method: str, path: str, body: Any = None,
                    content_type: str = JSON, params: dict[str, str] | None = None) -> Any:
        headers = {"Accept": JSON}
        if body is not None:
            headers["Content-Type"] = content_type
        try:
            return await self._api.call_api(
                path, method, query_params=list((params or {}).items()),
                header_params=headers, body=body, response_types_map=_AS_OBJECT,
                auth_settings=[], _return_http_data_only=True,
                _request_timeout=TIMEOUT_SECONDS)
        except ApiException as e:
            raise ApiError(e.status, _message(e)) from None

    async def get(self, path: str) -> dict[str, Any] | None:
        """The object at ``path``, or None when it does not exist."""
        try:
            return await self._call("GET", path)
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    async def list(self, path: str, label_selector: str = "") -> list[dict[str, Any]]:
        params = {"labelSelector": label_selector} if label_selector else None
        result = await self._call("GET", path, params=params)
        return list((result or {}).get("items") or [])

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._call("POST", path, body)

    async def apply(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply as FIELD_MANAGER, taking over fields others changed."""
        return await self._call("PATCH", path, body, APPLY_PATCH,
                                {"fieldManager": FIELD_MANAGER, "force": "true"})

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._call("PATCH", path, body, MERGE_PATCH)

    async def delete(self, path: str) -> bool:
        """Delete in the background; False when it was already gone."""
        try:
            await self._call("DELETE", path, params={"propagationPolicy": "Background"})
            return True
        except ApiError as e:
            if e.status == 404:
                return False
            raise

    async def has_api(self, group_version: str, kind: str) -> bool:
        """Whether the server serves ``kind`` in ``group_version`` (e.g. an optional CRD)."""
        found = await self.get(f"/apis/{group_version}")
        return any(r.get("kind") == kind for r in (found or {}).get("resources", []))
