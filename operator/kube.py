"""A small async Kubernetes API client over aiohttp, for the operator's own calls.

Credentials come from Kopf's login (kopf.ConnectionInfo: in-cluster service account or
kubeconfig), so the operator and Kopf talk to the same server as the same user.
"""
from __future__ import annotations

import base64
import json
import ssl
import tempfile
from typing import Any

import aiohttp

FIELD_MANAGER = "kubellm-operator"
PLURALS = {"Deployment": "deployments", "StatefulSet": "statefulsets",
           "Service": "services", "LeaderWorkerSet": "leaderworkersets",
           "LLMDeployment": "llmdeployments", "Secret": "secrets", "Event": "events",
           "NetworkPolicy": "networkpolicies"}


class ApiError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


def resource_path(api_version: str, kind: str, namespace: str, name: str | None = None,
                  subresource: str | None = None) -> str:
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    path = f"{base}/namespaces/{namespace}/{PLURALS[kind]}"
    if name:
        path += f"/{name}"
    if subresource:
        path += f"/{subresource}"
    return path


def manifest_path(obj: dict[str, Any], subresource: str | None = None) -> str:
    meta = obj["metadata"]
    return resource_path(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"],
                         subresource)


def _ssl_context(info: Any) -> ssl.SSLContext | bool:
    if not info.server.startswith("https"):
        return False
    ctx = ssl.create_default_context()
    if info.ca_path:
        ctx.load_verify_locations(cafile=info.ca_path)
    elif info.ca_data:
        ctx.load_verify_locations(cadata=base64.b64decode(info.ca_data).decode())
    if info.insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    cert, key = info.certificate_path, info.private_key_path
    if info.certificate_data:  # load_cert_chain only reads files
        cert = _temp_file(base64.b64decode(info.certificate_data))
        key = _temp_file(base64.b64decode(info.private_key_data))
    if cert:
        ctx.load_cert_chain(cert, key)
    return ctx


def _temp_file(data: bytes) -> str:
    # Owner-only (mkstemp's 0600); kept for the process's life, as the SSL context
    # may reload it.
    f = tempfile.NamedTemporaryFile(prefix="kubellm-", delete=False)
    f.write(data)
    f.close()
    return f.name


class KubeClient:
    def __init__(self, info: Any):
        self._session: aiohttp.ClientSession | None = None
        self.update_credentials(info)

    def update_credentials(self, info: Any) -> None:
        """Use new credentials (Kopf logs in again when a token expires)."""
        self.server = info.server.rstrip("/")
        self._headers = info.as_http_headers()
        self._ssl = _ssl_context(info)

    async def close(self) -> None:
        if self._session:
            await self._session.close()

    async def _request(self, method: str, path: str, body: Any = None,
                       content_type: str = "application/json",
                       params: dict[str, str] | None = None) -> Any:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=30))
        headers = {**self._headers, "Accept": "application/json"}
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body)
        async with self._session.request(method, self.server + path, data=data,
                                         headers=headers, params=params,
                                         ssl=self._ssl) as resp:
            text = await resp.text()
            if resp.status >= 400:
                try:
                    message = json.loads(text).get("message", text)
                except ValueError:
                    message = text
                raise ApiError(resp.status, message)
            return json.loads(text) if text else None

    async def get(self, path: str) -> dict[str, Any] | None:
        """The object at ``path``, or None when it does not exist."""
        try:
            return await self._request("GET", path)
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    async def list(self, path: str, label_selector: str = "") -> list[dict[str, Any]]:
        params = {"labelSelector": label_selector} if label_selector else None
        result = await self._request("GET", path, params=params)
        return list(result.get("items") or [])

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._request("POST", path, body)

    async def apply(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply as FIELD_MANAGER, taking over fields others changed."""
        return await self._request("PATCH", path, body, "application/apply-patch+yaml",
                                   {"fieldManager": FIELD_MANAGER, "force": "true"})

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._request("PATCH", path, body, "application/merge-patch+json")

    async def delete(self, path: str) -> bool:
        """Delete in the background; False when it was already gone."""
        try:
            await self._request("DELETE", path, params={"propagationPolicy": "Background"})
            return True
        except ApiError as e:
            if e.status == 404:
                return False
            raise

    async def has_api(self, group_version: str, kind: str) -> bool:
        """Whether the server serves ``kind`` in ``group_version`` (e.g. an optional CRD)."""
        found = await self.get(f"/apis/{group_version}")
        return any(r.get("kind") == kind for r in (found or {}).get("resources", []))
