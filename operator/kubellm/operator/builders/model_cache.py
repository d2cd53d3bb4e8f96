"""The model cache: a PersistentVolumeClaim filled once by a loader Job, mounted read-only.

Layout on the claim: the Hugging Face hub cache (``HF_HUB_CACHE=/model-cache/hub``), so
several models and revisions share one claim, concurrent loaders of the same files are
serialized by huggingface_hub's own lock files, and the runtime finds a model by its hub
id and revision exactly as it does in its local cache (``HF_HUB_OFFLINE=1`` in the pods:
they never download).

One loader Job per LLMDeployment, claim, model and revision (the *cache key*), named
``<name>-cache-<key>-<attempt>``: a failed Job is kept as the record of its failure and
the next attempt is a new Job, so retries never race a deletion.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

from kubellm.operator.builders.meta import INSTANCE_LABEL, NAME_LABEL, child_metadata
from kubellm.operator.builders.quantity import GI, format_bytes, round_up_gib, to_bytes
from kubellm.operator.builders.scheduling import pod_metadata, scheduling_fields
from kubellm.operator.builders.security import CONTAINER_SECURITY, POD_SECURITY
from kubellm.operator.builders.sizing import parameter_count
from kubellm.operator.validation import SpecError

MOUNT_PATH = "/model-cache"
HUB_CACHE = f"{MOUNT_PATH}/hub"
VOLUME_NAME = "model-cache"
KEY_LABEL = "kubellm.io/model-cache-key"
ATTEMPT_LABEL = "kubellm.io/attempt"
WHEN_DELETED_ANNOTATION = "kubellm.io/when-deleted"  # the claim's own record of its policy
RETAINED_FROM_ANNOTATION = "kubellm.io/retained-from"  # set when a retained claim is let go
LOADER_NAME = "kubellm-loader"  # app.kubernetes.io/name of loader pods: never a server's
CHECKPOINT_BYTES_PER_PARAMETER = 2  # hub checkpoints are bf16/fp16 as a rule
MIN_CLAIM_BYTES = 10 * GI
CLAIM_HEADROOM = 1.25  # tokenizer, config, and a revision that grows a little
LOADER_BACKOFF_LIMIT = 3  # pod retries inside one Job (the Job controller's own backoff)


@dataclass(frozen=True)
class CachePlan:
    claim_name: str
    owned: bool  # the operator creates the claim (no spec.model.cache.claimName)
    repo: str
    revision: str | None
    key: str  # names the loader Jobs of this claim, model and revision
    access_mode: str
    when_deleted: str

    @property
    def described(self) -> str:
        return f"{self.repo}@{self.revision}" if self.revision else self.repo


def claim_name(name: str) -> str:
    return f"{name}-model-cache"


def cache_plan(cr: dict[str, Any], spec: dict[str, Any]) -> CachePlan | None:
    cache = spec["model"].get("cache")
    if cache is None:
        return None
    name = cr["metadata"]["name"]
    claim = cache.get("claimName") or claim_name(name)
    repo, revision = spec["model"]["source"]["huggingFace"], spec["model"].get("revision")
    digest = hashlib.sha256("\0".join((name, claim, repo, revision or "")).encode())
    return CachePlan(claim, "claimName" not in cache, repo, revision,
                     digest.hexdigest()[:10], cache["accessMode"], cache["whenDeleted"])


def claim_bytes(spec: dict[str, Any]) -> int:
    cache = spec["model"]["cache"]
    if "size" in cache:
        return to_bytes(cache["size"], "spec.model.cache.size")
    params = parameter_count(spec)
    if params is None:
        raise SpecError("spec.model.cache.size: the model's size is unknown; set "
                        "spec.model.cache.size or spec.model.parameters")
    weights = params * CHECKPOINT_BYTES_PER_PARAMETER * CLAIM_HEADROOM
    return max(MIN_CLAIM_BYTES, round_up_gib(weights))


def build_cache_claim(cr: dict[str, Any], spec: dict[str, Any],
                      plan: CachePlan) -> dict[str, Any]:
    meta = child_metadata(cr, plan.claim_name)
    meta["annotations"] = {WHEN_DELETED_ANNOTATION: plan.when_deleted}
    claim: dict[str, Any] = {
        "accessModes": [plan.access_mode],
        "resources": {"requests": {"storage": format_bytes(claim_bytes(spec))}}}
    if spec["model"]["cache"].get("storageClassName"):
        claim["storageClassName"] = spec["model"]["cache"]["storageClassName"]
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta,
            "spec": claim}


def job_name(name: str, key: str, attempt: int) -> str:
    # A Job's name becomes its pods' job-name label: at most 63 characters.
    return f"{name[:40]}-cache-{key[:8]}-{attempt}"


def download_args(plan: CachePlan) -> list[str]:
    args = ["download", plan.repo]
    if plan.revision:
        args += ["--revision", plan.revision]
    # The summary (or the error) becomes the pod's termination message, which the
    # operator reads into the LLMDeployment's status and Events.
    return args + ["--summary-file", "/dev/termination-log"]


def build_loader_job(cr: dict[str, Any], spec: dict[str, Any], plan: CachePlan, image: str,
                     attempt: int) -> dict[str, Any]:
    name = cr["metadata"]["name"]
    meta = child_metadata(cr, job_name(name, plan.key, attempt),
                          {KEY_LABEL: plan.key, ATTEMPT_LABEL: str(attempt)})
    meta["annotations"] = {"kubellm.io/model": plan.described}
    env = [{"name": "HOME", "value": "/tmp"}, {"name": "HF_HOME", "value": "/tmp/huggingface"},
           {"name": "HF_HUB_CACHE", "value": HUB_CACHE}]
    if "tokenSecretRef" in spec["model"]["source"]:
        ref = spec["model"]["source"]["tokenSecretRef"]
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
            "name": ref["name"], "key": ref["key"]}}})
    container = {
        "name": "download", "image": image, "command": ["kubellm"],
        "args": download_args(plan), "env": env,
        "volumeMounts": [{"name": VOLUME_NAME, "mountPath": MOUNT_PATH},
                         {"name": "tmp", "mountPath": "/tmp"}],
        # Downloads stream to disk: little CPU and memory whatever the model's size.
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"},
                      "limits": {"memory": "4Gi"}},
        "securityContext": CONTAINER_SECURITY,
        "terminationMessagePolicy": "FallbackToLogsOnError"}
    if "imagePullPolicy" in spec:
        container["imagePullPolicy"] = spec["imagePullPolicy"]
    pod = {"restartPolicy": "Never", "containers": [container],
           "volumes": [{"name": VOLUME_NAME,
                        "persistentVolumeClaim": {"claimName": plan.claim_name}},
                       {"name": "tmp", "emptyDir": {}}],
           "securityContext": POD_SECURITY, "automountServiceAccountToken": False,
           "enableServiceLinks": False,
           # The loader needs no GPU; it goes where the user's placement says (a zonal
           # volume is then bound where the servers can reach it), without co-location.
           **scheduling_fields(spec, name, gpu_pod=False, colocate=False, loader=True)}
    labels = {NAME_LABEL: LOADER_NAME, INSTANCE_LABEL: name, KEY_LABEL: plan.key}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
            "spec": {"backoffLimit": LOADER_BACKOFF_LIMIT,
                     "template": {"metadata": pod_metadata(spec, labels), "spec": pod}}}


def serving_volume(plan: CachePlan) -> dict[str, Any]:
    return {"name": VOLUME_NAME, "persistentVolumeClaim": {"claimName": plan.claim_name,
                                                           "readOnly": True}}


def serving_mount() -> dict[str, Any]:
    return {"name": VOLUME_NAME, "mountPath": MOUNT_PATH, "readOnly": True}


def serving_env() -> list[dict[str, str]]:
    # The pods read the hub cache the loader filled and never reach for the hub.
    return [{"name": "HF_HUB_CACHE", "value": HUB_CACHE},
            {"name": "HF_HUB_OFFLINE", "value": "1"}]


def retry_delay_seconds(attempt: int, base: float, ceiling: float) -> float:
    """Wait after failed attempt ``attempt`` (1-based): base, 2 base, 4 base, ... capped."""
    return min(ceiling, base * math.pow(2, max(0, attempt - 1)))
