"""A Kubernetes API emulator (kmock) with the bits an operator relies on.

kmock stores objects as plain JSON; a real API server also stamps metadata (uid for
owner references, generation for observedGeneration, resourceVersion). This subclass
adds those stamps and declares the resources kubellm's operator uses.
"""
from __future__ import annotations

import asyncio
import datetime
import itertools
import uuid
from typing import Any

import aiohttp.web
import attrs
import kmock

from kubellm.operator.resources import GROUP, KIND, PLURAL, VERSION

LLMD = f"{GROUP}/{VERSION}/{PLURAL}"
RESOURCES = {
    "v1/namespaces": ("Namespace", False, ()),
    "v1/events": ("Event", True, ()),
    "v1/services": ("Service", True, ()),
    "v1/secrets": ("Secret", True, ()),
    "networking.k8s.io/v1/networkpolicies": ("NetworkPolicy", True, ()),
    "apps/v1/deployments": ("Deployment", True, ("status", "scale")),
    "apps/v1/statefulsets": ("StatefulSet", True, ("status", "scale")),
    "v1/pods": ("Pod", True, ("status",)),
    "v1/persistentvolumeclaims": ("PersistentVolumeClaim", True, ("status",)),
    "batch/v1/jobs": ("Job", True, ("status",)),
    "policy/v1/poddisruptionbudgets": ("PodDisruptionBudget", True, ("status",)),
    "v1/configmaps": ("ConfigMap", True, ()),
    "v1/serviceaccounts": ("ServiceAccount", True, ()),
    "rbac.authorization.k8s.io/v1/roles": ("Role", True, ()),
    "rbac.authorization.k8s.io/v1/rolebindings": ("RoleBinding", True, ()),
    LLMD: (KIND, True, ("status", "scale")),
}
VERBS = {"list", "watch", "get", "create", "patch", "update", "delete"}
POOLS = "inference.networking.k8s.io/v1/inferencepools"


def serve_inference_pools(emulator: "StampingEmulator") -> None:
    """Install the InferencePool CRD (optional: tests that need it call this)."""
    emulator.resources[POOLS] = kmock.ResourceInfo(kind="InferencePool", namespaced=True,
                                                   verbs=VERBS, subresources=("status",))


@attrs.define(kw_only=True)
class StampingEmulator(kmock.KubernetesEmulator):
    _versions: Any = attrs.field(factory=lambda: itertools.count(1), init=False)
    creations: list[tuple[str, str, str]] = attrs.field(factory=list, init=False)
    kubeconfig: Any = attrs.field(default=None, init=False)  # set by the fixture
    # plural -> message: writes of that resource fail with 422, as an admission would.
    rejections: dict[str, str] = attrs.field(factory=dict, init=False)
    # Writes refused with 409 because their metadata.resourceVersion was not the current one.
    conflicts: int = attrs.field(default=0, init=False)

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        # kmock cannot parse the cluster-scoped /api/v1/namespaces, which Kopf lists and
        # watches when it serves a list of namespaces: serve the namespaces in use here.
        if raw_request.path.rstrip("/") != "/api/v1/namespaces":
            return await super().__call__(raw_request)
        if raw_request.query.get("watch") not in ("true", "1"):
            names = sorted({ns for _, ns, _ in list(self.objects) if ns})
            return aiohttp.web.json_response({
                "apiVersion": "v1", "kind": "NamespaceList", "metadata": {"resourceVersion": "1"},
                "items": [{"apiVersion": "v1", "kind": "Namespace",
                           "metadata": {"name": name}} for name in names]})
        response = aiohttp.web.StreamResponse()
        await response.prepare(raw_request)
        await asyncio.sleep(float(raw_request.query.get("timeoutSeconds", 60)))  # no news
        return response

    def declare_resources(self) -> None:
        for key, (kind, namespaced, subresources) in RESOURCES.items():
            self.resources[key] = kmock.ResourceInfo(
                kind=kind, namespaced=namespaced, verbs=VERBS, subresources=subresources)

    async def _handle(self, request: kmock.Request) -> Any:
        if request.resource is not None and request.resource.plural in self.rejections \
                and request.action in (kmock.action.CREATE, kmock.action.UPDATE):
            raise kmock.KubernetesError(status=422, reason="Invalid",
                                        message=self.rejections[request.resource.plural])
        if request.resource is not None and isinstance(request.data, list):
            self._json_patch_concurrency(request)
        if request.resource is not None and isinstance(request.data, dict) \
                and request.action == kmock.action.UPDATE:
            self._resource_version_precondition(request)
            self._immutable_selector(request)
        if request.resource is not None and isinstance(request.data, dict):
            meta = request.data.setdefault("metadata", {})
            if request.action == kmock.action.CREATE:
                self.creations.append((request.resource.plural, request.namespace or "",
                                       meta.get("name", "")))
                meta.setdefault("uid", str(uuid.uuid4()))
                meta.setdefault("generation", 1)
                meta.setdefault("creationTimestamp", datetime.datetime.now(
                    datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
            elif request.action == kmock.action.UPDATE and "spec" in request.data:
                current = self._current(request)
                if current is not None and current.get("spec") != request.data["spec"]:
                    meta["generation"] = current.get("metadata", {}).get("generation", 1) + 1
            meta["resourceVersion"] = str(next(self._versions))
        return await super()._handle(request)

    def _resource_version_precondition(self, request: kmock.Request) -> None:
        """A patch that names a resourceVersion applies only to that version (409 otherwise),
        as on a real API server: what optimistic-concurrency writers rely on."""
        sent = (request.data.get("metadata") or {}).get("resourceVersion")
        current = self._current(request)
        if sent and current is not None \
                and sent != current.get("metadata", {}).get("resourceVersion"):
            self.conflicts += 1
            raise kmock.KubernetesError(
                status=409, reason="Conflict",
                message="the object has been modified; please apply your changes to the "
                        "latest version and try again")

    def _immutable_selector(self, request: kmock.Request) -> None:
        """Deployments' and StatefulSets' selectors never change after creation (apps/v1):
        a real server refuses the patch, so a takeover attempt fails here as it does there."""
        if request.resource.plural not in ("deployments", "statefulsets"):
            return
        sent = (request.data.get("spec") or {}).get("selector")
        current = self._current(request)
        if sent is not None and current is not None and \
                _plain(sent) != _plain((current.get("spec") or {}).get("selector")):
            kind = "Deployment" if request.resource.plural == "deployments" else "StatefulSet"
            raise kmock.KubernetesError(
                status=422, reason="Invalid",
                message=f'{kind}.apps "{request.name}" is invalid: spec.selector: Invalid '
                        "value: field is immutable")

    def _json_patch_concurrency(self, request: kmock.Request) -> None:
        """A failed resourceVersion test is a 422 conflict (Kopf retries on it); a JSON
        patch moves resourceVersion like any other write."""
        current = self._current(request) or {}
        version = current.get("metadata", {}).get("resourceVersion")
        for op in request.data:
            if op.get("op") == "test" and op.get("path") == "/metadata/resourceVersion" \
                    and op.get("value") != version:
                raise kmock.KubernetesError(status=422, reason="Invalid",
                                            message="resourceVersion test failed")
        request.data.append({"op": "add", "path": "/metadata/resourceVersion",
                             "value": str(next(self._versions))})

    def _current(self, request: kmock.Request) -> dict | None:
        key = (request.resource, request.namespace, request.name)
        if key in self.objects and not self.objects[key].deleted:
            return dict(self.objects[key])
        return None


def live_all(emulator: StampingEmulator, resource: str, namespace: str) -> list[dict]:
    """Every stored, not deleted object of ``resource`` in ``namespace``."""
    found = []
    for res, ns, name in list(emulator.objects):
        if ns == namespace and f"{res.group}/{res.version}/{res.plural}".lstrip("/") == resource:
            obj = live(emulator, resource, ns, name)
            if obj is not None:
                found.append(obj)
    return found


def live(emulator: StampingEmulator, resource: str, namespace: str, name: str) -> dict | None:
    """The stored object as a plain dict, or None if absent or deleted."""
    group_version, plural = resource.rsplit("/", 1)
    group, version = group_version.rsplit("/", 1) if "/" in group_version else ("", group_version)
    key = (kmock.resource(group, version, plural), namespace, name)
    if key not in emulator.objects or emulator.objects[key].deleted:
        return None
    return _plain(emulator.objects[key].raw)


def _plain(value: Any) -> Any:
    if isinstance(value, dict) or hasattr(value, "items"):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
