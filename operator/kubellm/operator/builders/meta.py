"""Names, labels and owner references shared by every child of an LLMDeployment."""
from __future__ import annotations

from typing import Any

from kubellm.operator.rendezvous import STATEFULSET_INDEX_LABEL
from kubellm.operator.resources import API_VERSION, KIND

NAME_LABEL = "app.kubernetes.io/name"
INSTANCE_LABEL = "app.kubernetes.io/instance"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
ROLE_LABEL = "kubellm.io/role"  # leader: serves HTTP; worker: a later pipeline stage
GROUP_LABEL = "kubellm.io/group"  # replica index of a multi-node StatefulSet group
MANAGER = "kubellm-operator"
COMPONENT_LABEL = "app.kubernetes.io/component"
# app.kubernetes.io/name of the pods that are not model servers: no selector of the
# servers (Deployment, PodDisruptionBudget, NetworkPolicy) ever matches them.
ACTIVATOR_NAME, EPP_NAME = "kubellm-activator", "kubellm-epp"


def selector_labels(name: str) -> dict[str, str]:
    """Labels that select every pod of one LLMDeployment (immutable once created)."""
    return {NAME_LABEL: "kubellm", INSTANCE_LABEL: name}


# The activator's pods carry a value for every key a serving selector uses (ROLE_LABEL,
# and the StatefulSet pod index of multi-node groups), so that switching the Service or
# the pool between the replicas and the activator changes values only, never keys: a
# server-side apply would keep a key it did not create with a POST (another field manager
# owns it), and the switched selector would match nothing.
ACTIVATOR_ROLE = "activator"


def activator_labels(name: str) -> dict[str, str]:
    """Labels of the activator pods of one LLMDeployment (scale from zero)."""
    return {NAME_LABEL: ACTIVATOR_NAME, INSTANCE_LABEL: name, ROLE_LABEL: ACTIVATOR_ROLE,
            STATEFULSET_INDEX_LABEL: "0"}


def activator_selector(name: str, serving: dict[str, str]) -> dict[str, str]:
    """The serving selector's keys with the activator pods' values."""
    labels = activator_labels(name)
    return {key: labels[key] for key in serving}


def epp_labels(name: str) -> dict[str, str]:
    """Labels of the Endpoint Picker pods of one LLMDeployment (routing)."""
    return {NAME_LABEL: EPP_NAME, INSTANCE_LABEL: name}


def child_labels(name: str) -> dict[str, str]:
    return {**selector_labels(name), MANAGED_BY_LABEL: MANAGER}


def owner_reference(owner: dict[str, Any]) -> dict[str, Any]:
    """Controller reference that lets the garbage collector delete the child with ``owner``."""
    meta = owner["metadata"]
    return {"apiVersion": API_VERSION, "kind": KIND, "name": meta["name"],
            "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}


def child_metadata(owner: dict[str, Any], name: str,
                   extra_labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta = owner["metadata"]
    return {"name": name, "namespace": meta["namespace"],
            "labels": {**child_labels(meta["name"]), **(extra_labels or {})},
            "ownerReferences": [owner_reference(owner)]}


def is_owned_by(child: dict[str, Any], owner_uid: str) -> bool:
    refs = child.get("metadata", {}).get("ownerReferences") or []
    return any(ref.get("uid") == owner_uid and ref.get("kind") == KIND for ref in refs)


def owner_name(child: dict[str, Any]) -> str | None:
    """Name of the LLMDeployment that controls ``child``, if any."""
    for ref in child.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("kind") == KIND and ref.get("apiVersion", "").startswith("kubellm.io/"):
            return ref.get("name")
    return None
