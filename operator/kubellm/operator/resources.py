"""Names of the API resources the operator reads and writes, and their URL paths.

The one place for the LLMDeployment's group, version, kind and plural, and for the
plural of every kind the operator touches (children, other projects' objects, Events).
"""
from __future__ import annotations

import urllib.parse
from typing import Any

GROUP, VERSION, KIND, PLURAL = "kubellm.io", "v1alpha1", "LLMDeployment", "llmdeployments"
API_VERSION = f"{GROUP}/{VERSION}"
FIELD_MANAGER = "kubellm-operator"  # server-side apply manager and Event source

PLURALS = {"Deployment": "deployments", "StatefulSet": "statefulsets",
           "Service": "services", "LeaderWorkerSet": "leaderworkersets",
           "LLMDeployment": PLURAL, "Secret": "secrets", "Event": "events",
           "NetworkPolicy": "networkpolicies", "ScaledObject": "scaledobjects",
           "Pod": "pods", "Job": "jobs", "PersistentVolumeClaim": "persistentvolumeclaims",
           "PodDisruptionBudget": "poddisruptionbudgets", "ConfigMap": "configmaps",
           "ServiceAccount": "serviceaccounts", "Role": "roles", "RoleBinding": "rolebindings",
           "InferencePool": "inferencepools", "HTTPScaledObject": "httpscaledobjects"}


def resource_path(api_version: str, kind: str, namespace: str, name: str | None = None,
                  subresource: str | None = None) -> str:
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    path = f"{base}/namespaces/{_quote(namespace)}/{PLURALS[kind]}"
    if name:
        path += f"/{_quote(name)}"
    if subresource:
        path += f"/{subresource}"
    return path


def manifest_path(obj: dict[str, Any], subresource: str | None = None) -> str:
    meta = obj["metadata"]
    return resource_path(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"],
                         subresource)


def llmd_path(namespace: str, name: str, subresource: str | None = None) -> str:
    return resource_path(API_VERSION, KIND, namespace, name, subresource)


def _quote(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")
