"""The runtime pod's volumes: shared memory, scratch, and where the weights come from.

- ``dshm``: /dev/shm, memory-backed. It counts against the pod's memory, so its size is
  added to the memory request and limit (pod.resources); unset, 1 GiB + 1 GiB per rank.
- ``cache``: the writable scratch (HOME, hub cache without a model cache claim). When the
  weights are downloaded there, the pod requests that much ephemeral storage (the kubelet
  places it on a node with the disk, and evicts it only well beyond).
- ``model`` (a pvc source) or ``model-cache`` (the model cache claim), read-only.
"""
from __future__ import annotations

from typing import Any

from kubellm.operator.builders import model_cache
from kubellm.operator.builders.quantity import GI, format_bytes, round_up_gib, to_bytes
from kubellm.operator.builders.sizing import parameter_count
from kubellm.operator.builders.startup import (CHECKPOINT_BYTES_PER_PARAMETER,
                                               downloads_at_start)

MODEL_MOUNT = "/models"
CACHE_MOUNT = "/cache"
SHM_BASE_BYTES, SHM_PER_RANK_BYTES = GI, GI
SCRATCH_EXTRA_BYTES = GI  # tokenizer files, compile caches
SCRATCH_LIMIT_FACTOR = 1.5  # evict only a pod far past its estimate


def shared_memory_bytes(spec: dict[str, Any], processes: int) -> int:
    given = spec["resources"].get("sharedMemory")
    if given is not None:
        return to_bytes(given, "spec.resources.sharedMemory")
    return SHM_BASE_BYTES + SHM_PER_RANK_BYTES * processes


def scratch_bytes(spec: dict[str, Any]) -> int | None:
    """Ephemeral storage a pod needs when it downloads its weights, or None. Every pod of
    a multi-node replica downloads whole shards, so each counts the whole checkpoint."""
    params = parameter_count(spec)
    if not downloads_at_start(spec) or params is None:
        return None
    return round_up_gib(params * CHECKPOINT_BYTES_PER_PARAMETER) + SCRATCH_EXTRA_BYTES


def volumes(spec: dict[str, Any], plan: model_cache.CachePlan | None, *,
            processes: int) -> list[dict[str, Any]]:
    scratch: dict[str, Any] = {}
    if (need := scratch_bytes(spec)) is not None:
        scratch["sizeLimit"] = format_bytes(round_up_gib(need * SCRATCH_LIMIT_FACTOR))
    vols = [{"name": "dshm", "emptyDir": {
                "medium": "Memory",
                "sizeLimit": format_bytes(shared_memory_bytes(spec, processes))}},
            {"name": "cache", "emptyDir": scratch},
            {"name": "tmp", "emptyDir": {}}]
    if "pvc" in spec["model"]["source"]:
        vols.append({"name": "model", "persistentVolumeClaim": {
            "claimName": spec["model"]["source"]["pvc"]["claimName"], "readOnly": True}})
    if plan is not None:
        vols.append(model_cache.serving_volume(plan))
    return vols


def mounts(spec: dict[str, Any], plan: model_cache.CachePlan | None) -> list[dict[str, Any]]:
    found = [{"name": "dshm", "mountPath": "/dev/shm"},
             {"name": "cache", "mountPath": CACHE_MOUNT},
             {"name": "tmp", "mountPath": "/tmp"}]
    if "pvc" in spec["model"]["source"]:
        found.append({"name": "model", "mountPath": MODEL_MOUNT, "readOnly": True})
    if plan is not None:
        found.append(model_cache.serving_mount())
    return found
