"""Where pods go: the LLMDeployment's scheduling fields, passed to every pod it owns.

The pods that serve no model (the Endpoint Picker, the activator) run on ordinary CPU
nodes: they take the user's tolerations, priority class, labels and annotations, not the
placement meant for the GPU pods (nodeSelector, affinity, spread, runtime class).

nodeSelector, tolerations, affinity, topologySpreadConstraints, priorityClassName and
runtimeClassName come from the spec as they are, plus two things the operator adds:
- GPU pods tolerate the NoSchedule taint named after the GPU resource (GPU node pools
  are commonly tainted `nvidia.com/gpu`), unless the user names that key themselves;
- with a ReadWriteOnce model cache, a required pod affinity keeps every pod of the
  LLMDeployment on one node, the one the volume attaches to.
"""
from __future__ import annotations

import copy
from typing import Any

from kubellm.operator.builders.meta import selector_labels

HOSTNAME_TOPOLOGY = "kubernetes.io/hostname"
PASSED_THROUGH = ("nodeSelector", "topologySpreadConstraints", "priorityClassName",
                  "runtimeClassName")
# The loader Job needs neither a GPU runtime nor to be spread like the servers.
NOT_FOR_LOADER = ("topologySpreadConstraints", "runtimeClassName")


def tolerations(spec: dict[str, Any], *, gpu_pod: bool) -> list[dict[str, Any]]:
    given = [copy.deepcopy(t) for t in spec.get("tolerations") or []]
    key = spec["resources"]["gpuResourceName"]
    if gpu_pod and not any(t.get("key") == key for t in given):
        given.append({"key": key, "operator": "Exists", "effect": "NoSchedule"})
    return given


def affinity(spec: dict[str, Any], name: str, *, colocate: bool) -> dict[str, Any]:
    result = copy.deepcopy(spec.get("affinity") or {})
    if colocate:
        pod_affinity = result.setdefault("podAffinity", {})
        terms = pod_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", [])
        terms.append({"labelSelector": {"matchLabels": selector_labels(name)},
                      "topologyKey": HOSTNAME_TOPOLOGY})
    return result


def scheduling_fields(spec: dict[str, Any], name: str, *, gpu_pod: bool, colocate: bool,
                      loader: bool = False) -> dict[str, Any]:
    """The scheduling part of a pod spec (only the keys that have a value)."""
    fields: dict[str, Any] = {}
    for key in PASSED_THROUGH:
        if spec.get(key) and not (loader and key in NOT_FOR_LOADER):
            fields[key] = copy.deepcopy(spec[key])
    if tolerated := tolerations(spec, gpu_pod=gpu_pod):
        fields["tolerations"] = tolerated
    if placed := affinity(spec, name, colocate=colocate):
        fields["affinity"] = placed
    return fields


def cpu_pod_fields(spec: dict[str, Any]) -> dict[str, Any]:
    """The scheduling part of the pod spec of a pod that serves no model."""
    fields: dict[str, Any] = {}
    if spec.get("priorityClassName"):
        fields["priorityClassName"] = spec["priorityClassName"]
    if spec.get("tolerations"):
        fields["tolerations"] = [copy.deepcopy(t) for t in spec["tolerations"]]
    return fields


def pod_metadata(spec: dict[str, Any], labels: dict[str, str],
                 annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """Pod template metadata: the user's extra labels and annotations, ours on top."""
    meta: dict[str, Any] = {"labels": {**(spec.get("podLabels") or {}), **labels}}
    if spec.get("podAnnotations") or annotations:
        meta["annotations"] = {**(spec.get("podAnnotations") or {}), **(annotations or {})}
    return meta
