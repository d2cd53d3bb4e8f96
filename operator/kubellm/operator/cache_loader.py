"""The model cache at run time: the claim, the loader Job, and whether the cache is filled.

``ensure_cache`` runs in every reconcile pass of an LLMDeployment with spec.model.cache:
- the claim: created (ours), adopted back when a deleted LLMDeployment of the same name
  retained it, grown when spec.model.cache.size grows; a user's claim is only read;
- the loader Job of the current cache key: created once; when it has failed, the next
  attempt is created after a backoff (base, 2 base, 4 base, ... at most RETRY_CEILING);
  the Jobs of other keys and older attempts are pruned;
- the result: filled or not, the ModelCached condition, and a Degraded reason when the
  loader failed or the user's claim is missing.
"""
from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

from kubellm.operator import apply
from kubellm.operator.builders import model_cache as mc
from kubellm.operator.builders.meta import (INSTANCE_LABEL, MANAGED_BY_LABEL, MANAGER,
                                            is_owned_by, owner_reference)
from kubellm.operator.builders.quantity import to_bytes
from kubellm.operator.kube import KubeClient
from kubellm.operator.ownership import NameConflict, is_controlled_by
from kubellm.operator.resources import manifest_path, resource_path

RETRY_CEILING_SECONDS = 1800.0
CLAIM_KIND = ("v1", "PersistentVolumeClaim")
JOB_NAME_LABEL = "job-name"  # set by the Job controller on its pods


@dataclass(frozen=True)
class RetryPolicy:
    base_seconds: float = 60.0
    ceiling_seconds: float = RETRY_CEILING_SECONDS


@dataclass
class CacheState:
    filled: bool
    reason: str  # of the ModelCached condition
    message: str
    degraded: bool = False  # the loader failed, or the user's claim is missing
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, msg)

    def condition(self) -> dict[str, Any]:
        return {"type": "ModelCached", "status": "True" if self.filled else "False",
                "reason": self.reason, "message": self.message}


def _condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or []
                 if c.get("type") == type_ and c.get("status") == "True"), None)


def _parse_time(value: Any) -> datetime.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _stamp(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


async def ensure_claim(client: KubeClient, cr: dict[str, Any], spec: dict[str, Any],
                       plan: mc.CachePlan) -> CacheState | None:
    """Create, adopt or grow our claim; check the user's. A CacheState when the cache
    cannot be filled because of the claim, else None. Raises NameConflict."""
    namespace = cr["metadata"]["namespace"]
    path = resource_path("v1", "PersistentVolumeClaim", namespace, plan.claim_name)
    actual = await client.get(path)
    if not plan.owned:
        if actual is None:
            return CacheState(False, "ClaimNotFound", f"PersistentVolumeClaim {namespace}/"
                              f"{plan.claim_name} (spec.model.cache.claimName) does not "
                              "exist", degraded=True)
        return None
    desired = mc.build_cache_claim(cr, spec, plan)
    if actual is None:
        await client.create(resource_path("v1", "PersistentVolumeClaim", namespace), desired)
        return None
    uid = cr["metadata"]["uid"]
    if not is_controlled_by(actual, uid):
        annotations = actual["metadata"].get("annotations") or {}
        has_controller = any(r.get("controller") for r in
                             actual["metadata"].get("ownerReferences") or [])
        if annotations.get(mc.RETAINED_FROM_ANNOTATION) != cr["metadata"]["name"] \
                or has_controller:
            raise NameConflict(desired)
        # Ours before: a deleted LLMDeployment of this name let it go (whenDeleted Retain).
        await client.merge_patch(path, {"metadata": {
            "ownerReferences": [owner_reference(cr)],
            "annotations": {mc.RETAINED_FROM_ANNOTATION: None,
                            mc.WHEN_DELETED_ANNOTATION: plan.when_deleted}}})
        return None
    patch: dict[str, Any] = {}
    if (actual["metadata"].get("annotations") or {}).get(mc.WHEN_DELETED_ANNOTATION) \
            != plan.when_deleted:
        patch["metadata"] = {"annotations": {mc.WHEN_DELETED_ANNOTATION: plan.when_deleted}}
    wanted = desired["spec"]["resources"]["requests"]["storage"]
    current = ((actual.get("spec") or {}).get("resources") or {}).get("requests", {}) \
        .get("storage", "0")
    if to_bytes(wanted, "spec.model.cache.size") > to_bytes(current, "claim size"):
        # Claims only grow (and only where the StorageClass allows expansion).
        patch["spec"] = {"resources": {"requests": {"storage": wanted}}}
    if patch:
        await client.merge_patch(path, patch)
    return None


async def release_claim(client: KubeClient, claim: dict[str, Any], owner_name: str) -> str:
    """Let go of (Retain) or delete (Delete) an owned claim no longer wanted:
    'released' or 'deleted'. A retained claim loses its owner reference, so the garbage
    collector leaves it, and remembers whose it was for a later adoption."""
    meta = claim["metadata"]
    path = resource_path("v1", "PersistentVolumeClaim", meta["namespace"], meta["name"])
    policy = (meta.get("annotations") or {}).get(mc.WHEN_DELETED_ANNOTATION, "Retain")
    if policy == "Delete":
        await client.delete(path)
        return "deleted"
    await client.merge_patch(path, {"metadata": {
        "ownerReferences": None,
        "annotations": {mc.RETAINED_FROM_ANNOTATION: owner_name}}})
    return "released"


async def release_unwanted_claims(client: KubeClient, owner: dict[str, Any],
                                  plan: mc.CachePlan | None) -> list[tuple[str, str]]:
    """Release or delete our claims that ``plan`` does not use (all of them for None)."""
    done = []
    for claim in await apply.owned_children(client, owner, (CLAIM_KIND,)):
        if plan is None or not plan.owned or claim["metadata"]["name"] != plan.claim_name:
            outcome = await release_claim(client, claim, owner["metadata"]["name"])
            done.append((outcome, claim["metadata"]["name"]))
    return done


async def delete_loader_jobs(client: KubeClient, owner: dict[str, Any]) -> list[str]:
    deleted = []
    for job in await loader_jobs(client, owner):
        if await client.delete(manifest_path(job)):
            deleted.append(job["metadata"]["name"])
    return deleted


async def loader_jobs(client: KubeClient, cr: dict[str, Any]) -> list[dict[str, Any]]:
    meta = cr["metadata"]
    selector = f"{INSTANCE_LABEL}={meta['name']},{MANAGED_BY_LABEL}={MANAGER}"
    jobs = await client.list(resource_path("batch/v1", "Job", meta["namespace"]), selector)
    return [{"apiVersion": "batch/v1", "kind": "Job", **j} for j in jobs
            if is_owned_by(j, meta["uid"])]


def _attempt(job: dict[str, Any]) -> int:
    try:
        return int(job["metadata"].get("labels", {}).get(mc.ATTEMPT_LABEL, "0"))
    except ValueError:
        return 0


async def _termination_message(client: KubeClient, job: dict[str, Any]) -> str:
    """What the loader wrote to its termination log (its summary or its error)."""
    meta = job["metadata"]
    pods = await client.list(resource_path("v1", "Pod", meta["namespace"]),
                             f"{JOB_NAME_LABEL}={meta['name']}")
    # (Filtered here too: an API server may ignore the label selector.)
    pods = [p for p in pods if (p["metadata"].get("labels") or {}).get(JOB_NAME_LABEL)
            == meta["name"]]
    pods.sort(key=lambda p: p["metadata"].get("creationTimestamp") or "")
    for pod in reversed(pods):
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            for state in (status.get("state"), status.get("lastState")):
                message = ((state or {}).get("terminated") or {}).get("message")
                if message:
                    return message.strip()
    return ""


async def ensure_cache(client: KubeClient, cr: dict[str, Any], spec: dict[str, Any],
                       plan: mc.CachePlan, image: str, retry: RetryPolicy,
                       now: datetime.datetime) -> CacheState:
    blocked = await ensure_claim(client, cr, spec, plan)
    if blocked is not None:
        return blocked
    jobs = await loader_jobs(client, cr)
    mine = sorted((j for j in jobs if j["metadata"].get("labels", {}).get(mc.KEY_LABEL)
                   == plan.key), key=_attempt)
    latest = mine[-1] if mine else None
    for job in jobs:  # other keys, older attempts: records no longer needed
        if job is not latest:
            await client.delete(manifest_path(job))
    state, create_attempt = _judge(latest, plan, retry, now)
    if state.reason == "Filled":
        summary = await _termination_message(client, latest)
        state.message += f": {summary}" if summary else ""
    elif state.degraded:
        detail = await _termination_message(client, latest)
        state.message = state.message.replace("{detail}", f": {detail}" if detail else "")
    if create_attempt:
        job = mc.build_loader_job(cr, spec, plan, image, create_attempt)
        existing = await client.get(manifest_path(job))
        if existing is not None and not is_controlled_by(existing, cr["metadata"]["uid"]):
            raise NameConflict(job)
        if existing is None:
            await client.create(resource_path("batch/v1", "Job", cr["metadata"]["namespace"]),
                                job)
        filling = (f"loader Job {job['metadata']['name']} created (attempt {create_attempt}) "
                   f"to download {plan.described} into claim {plan.claim_name}")
        if not state.degraded:
            state = CacheState(False, "Pending", filling)
        # else: the failed attempt stays this pass's verdict, with the message an earlier
        # pass may have posted (no second Warning), so that a failure first seen when its
        # retry is already due is still reported.
        state.events.append(("Normal", "ModelCacheFilling", filling))
    return state


def _judge(job: dict[str, Any] | None, plan: mc.CachePlan, retry: RetryPolicy,
           now: datetime.datetime) -> tuple[CacheState, int]:
    """(state, attempt to create now or 0) from the latest loader Job."""
    if job is None:
        return CacheState(False, "Pending", ""), 1
    name, attempt = job["metadata"]["name"], _attempt(job)
    status = job.get("status") or {}
    if _condition(job, "Complete") or status.get("succeeded", 0) >= 1:
        return CacheState(True, "Filled", f"{plan.described} is on claim {plan.claim_name} "
                                          f"(loader Job {name})"), 0
    failed = _condition(job, "Failed")
    if failed is not None:
        since = (_parse_time(failed.get("lastTransitionTime"))
                 or _parse_time(job["metadata"].get("creationTimestamp")) or now)
        delay = mc.retry_delay_seconds(attempt, retry.base_seconds, retry.ceiling_seconds)
        retry_at = since + datetime.timedelta(seconds=delay)
        why = failed.get("reason") or "Failed"
        return CacheState(False, "LoaderFailed",
                          f"loader Job {name} (attempt {attempt}) failed: {why}{{detail}}; "
                          f"attempt {attempt + 1} is due at {_stamp(retry_at)} "
                          f"(kubectl logs job/{name})", degraded=True), \
            attempt + 1 if now >= retry_at else 0
    if status.get("active", 0) >= 1:
        return CacheState(False, "Downloading", f"loader Job {name} (attempt {attempt}) is "
                                                f"downloading {plan.described} into claim "
                                                f"{plan.claim_name}; progress: kubectl logs "
                                                f"-f job/{name}"), 0
    return CacheState(False, "Pending", f"loader Job {name} (attempt {attempt}) is waiting "
                                        f"for its pod to start (claim {plan.claim_name})"), 0
