"""The model cache through the operator process and the emulated API server.

The emulator runs no Job controller and no kubelet: the tests play them, patching a
loader Job's status and creating its pod with a termination message, as those would.
"""
from __future__ import annotations

import asyncio
import datetime

from kubellm.operator.builders import model_cache as mc

from .emulator import LLMD, live, live_all
from .harness import OperatorProcess, wait_until
from .test_operator_emulated import (DEPLOYMENTS, EVENTS, NS, condition, llmd_path,
                                     llmd_status, manifest, request)

JOBS, CLAIMS = "batch/v1/jobs", "v1/persistentvolumeclaims"
MODEL = {"source": {"huggingFace": "Qwen/Qwen2.5-0.5B-Instruct"}, "cache": {}}


def _jobs(cluster) -> list[dict]:
    return sorted(live_all(cluster, JOBS, NS), key=lambda j: j["metadata"]["name"])


def _stamp(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


async def _job_status(cluster, job: dict, status: dict) -> None:
    await request(cluster, "PATCH", f"/apis/batch/v1/namespaces/{NS}/jobs/"
                  f"{job['metadata']['name']}/status", {"status": status})


async def _finish(cluster, job: dict, *, succeeded: bool, message: str,
                  at: datetime.datetime | None = None) -> None:
    """The kubelet's pod of ``job`` terminated with ``message``, then the Job controller's
    verdict on the Job."""
    name = job["metadata"]["name"]
    await request(cluster, "POST", f"/api/v1/namespaces/{NS}/pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{name}-pod", "namespace": NS, "labels": {"job-name": name}},
        "spec": {"containers": [{"name": "download", "image": "img"}]},
        "status": {"phase": "Succeeded" if succeeded else "Failed", "containerStatuses": [
            {"name": "download", "state": {"terminated": {
                "exitCode": 0 if succeeded else 1, "message": message}}}]}})
    stamp = _stamp(at or datetime.datetime.now(datetime.timezone.utc))
    if succeeded:
        status = {"succeeded": 1, "conditions": [
            {"type": "Complete", "status": "True", "lastTransitionTime": stamp}]}
    else:
        status = {"failed": 4, "conditions": [
            {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
             "message": "Job has reached the specified backoff limit",
             "lastTransitionTime": stamp}]}
    await _job_status(cluster, job, status)


def _events(cluster, reason: str) -> list[dict]:
    return [e for e in live_all(cluster, EVENTS, NS) if e["reason"] == reason]


async def test_two_replicas_share_one_download_and_start_once_it_is_filled(cluster, operator):
    await request(cluster, "POST", llmd_path(), manifest("chat", {"model": MODEL,
                                                                   "replicas": 2}))
    claim = await wait_until(lambda: live(cluster, CLAIMS, NS, "chat-model-cache"),
                             what="the cache claim", log=operator.log)
    uid = live(cluster, LLMD, NS, "chat")["metadata"]["uid"]
    assert claim["metadata"]["ownerReferences"][0]["uid"] == uid
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "10Gi"  # 1 GB model: minimum
    [job] = await wait_until(lambda: _jobs(cluster), what="the loader Job", log=operator.log)
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][:2] == ["download", "Qwen/Qwen2.5-0.5B-Instruct"]
    await wait_until(lambda: condition(cluster, "chat", "Progressing").get("reason")
                     == "WaitingForModelCache", what="waiting for the cache", log=operator.log)
    assert condition(cluster, "chat", "ModelCached")["status"] == "False"
    assert live(cluster, DEPLOYMENTS, NS, "chat") is None  # no server before the weights
    await wait_until(lambda: _events(cluster, "ModelCacheFilling"), what="an Event",
                     log=operator.log)

    await _job_status(cluster, job, {"active": 1})
    await wait_until(lambda: condition(cluster, "chat", "ModelCached").get("reason")
                     == "Downloading", what="Downloading", log=operator.log)
    assert "kubectl logs -f job/" in condition(cluster, "chat", "ModelCached")["message"]

    await _finish(cluster, job, succeeded=True, message="Qwen/x@abc: 5 files, 1.0 GB")
    deployment = await wait_until(lambda: live(cluster, DEPLOYMENTS, NS, "chat"),
                                  what="the Deployment", log=operator.log)
    cached = await wait_until(lambda: (c := condition(cluster, "chat", "ModelCached"))
                              .get("status") == "True" and c, what="ModelCached",
                              log=operator.log)
    assert "5 files, 1.0 GB" in cached["message"]
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == mc.VOLUME_NAME)
    assert volume["persistentVolumeClaim"] == {"claimName": "chat-model-cache",
                                               "readOnly": True}
    await wait_until(lambda: _events(cluster, "ModelCached"), what="a ModelCached Event",
                     log=operator.log)
    await asyncio.sleep(2.5)  # resync passes: the Job is never created again
    assert [c for c in cluster.creations if c[0] == "jobs"] == [
        ("jobs", NS, job["metadata"]["name"])]

    # A new revision: a new Job fills it while the running servers stay as they are.
    env_before = pod["containers"][0]["env"]
    await request(cluster, "PATCH", llmd_path("chat"), {"spec": {"model": {"revision": "v2"}}})
    new = await wait_until(lambda: [j for j in _jobs(cluster)
                                    if j["metadata"]["name"] != job["metadata"]["name"]],
                           what="the new revision's Job", log=operator.log)
    assert new[0]["spec"]["template"]["spec"]["containers"][0]["args"][2:4] == \
        ["--revision", "v2"]
    await asyncio.sleep(1.5)
    held = live(cluster, DEPLOYMENTS, NS, "chat")
    assert held["spec"]["template"]["spec"]["containers"][0]["env"] == env_before
    await _finish(cluster, new[0], succeeded=True, message="done")
    await wait_until(lambda: {"name": "KUBELLM_REVISION", "value": "v2"} in live(
        cluster, DEPLOYMENTS, NS, "chat")["spec"]["template"]["spec"]["containers"][0]["env"],
        what="the rollout to v2", log=operator.log)
    await wait_until(lambda: [j["metadata"]["name"] for j in _jobs(cluster)]
                     == [new[0]["metadata"]["name"]], what="old Job pruned", log=operator.log)


async def test_a_failed_loader_is_degraded_until_its_retry_is_due(cluster, operator):
    # The default base (60 s) leaves the operator a minute to see the failure first.
    await request(cluster, "POST", llmd_path(), manifest("chat", {"model": MODEL}))
    [first] = await wait_until(lambda: _jobs(cluster), what="Job 1", log=operator.log)
    failed_at = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    await _finish(cluster, first, succeeded=False, at=failed_at,
                  message="Qwen/Qwen2.5-0.5B-Instruct is gated: accept its license")
    degraded = await wait_until(
        lambda: (c := condition(cluster, "chat", "Degraded")).get("status") == "True"
        and c, what="Degraded", log=operator.log)
    assert degraded["reason"] == "ModelCacheFailed"
    assert "(attempt 1) failed: BackoffLimitExceeded" in degraded["message"]
    assert "is gated: accept its license" in degraded["message"]
    assert f"attempt 2 is due at {_stamp(failed_at + datetime.timedelta(seconds=60))}" \
        in degraded["message"]
    assert llmd_status(cluster, "chat")["phase"] == "Degraded"
    [event] = await wait_until(lambda: _events(cluster, "ModelCacheFailed"),
                               what="a Warning Event", log=operator.log)
    assert event["type"] == "Warning" and event["message"] == degraded["message"]
    assert [j["metadata"]["name"] for j in _jobs(cluster)] == [first["metadata"]["name"]]


def _failure_events(cluster, attempt: int) -> list[dict]:
    return [e for e in _events(cluster, "ModelCacheFailed")
            if f"(attempt {attempt}) failed" in e["message"]]


async def test_failed_attempts_are_retried_with_backoff_and_each_is_reported(cluster,
                                                                             tmp_path):
    # With a 1 s base the operator may first see a failure when its retry is already due:
    # it must still report it (a Warning Event per failed attempt), whichever pass sees it.
    operator = OperatorProcess(cluster.kubeconfig, tmp_path / "op.log",
                               ["--cache-retry-seconds", "1"])
    await operator.start()
    try:
        await request(cluster, "POST", llmd_path(), manifest("chat", {"model": MODEL}))
        previous = None
        for attempt in (1, 2):
            [job] = await wait_until(
                lambda a=attempt: [j for j in _jobs(cluster)
                                   if j["metadata"]["labels"][mc.ATTEMPT_LABEL] == str(a)],
                what=f"attempt {attempt}", log=operator.log)
            if previous is not None:  # older attempts are pruned
                await wait_until(lambda p=previous: live(cluster, JOBS, NS, p) is None,
                                 what=f"attempt {attempt - 1} pruned", log=operator.log)
            failed_at = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
            await _finish(cluster, job, succeeded=False, at=failed_at, message=f"no {attempt}")
            [event] = await wait_until(lambda a=attempt: _failure_events(cluster, a),
                                       what=f"attempt {attempt}'s Warning", log=operator.log)
            # Backoff: 1 s after attempt 1 failed, 2 s after attempt 2.
            due = _stamp(failed_at + datetime.timedelta(seconds=attempt))
            assert f"attempt {attempt + 1} is due at {due}" in event["message"]
            assert f": no {attempt};" in event["message"]
            previous = job["metadata"]["name"]
        [third] = await wait_until(
            lambda: [j for j in _jobs(cluster) if j["metadata"]["labels"][mc.ATTEMPT_LABEL]
                     == "3"], what="attempt 3", log=operator.log)
        await wait_until(lambda: len(_jobs(cluster)) == 1, what="older attempts pruned",
                         log=operator.log)
        await _finish(cluster, third, succeeded=True, message="ok")
        await wait_until(lambda: live(cluster, DEPLOYMENTS, NS, "chat"),
                         what="the Deployment", log=operator.log)
        await wait_until(lambda: condition(cluster, "chat", "Degraded").get("status")
                         == "False", what="Degraded False", log=operator.log)
        assert len(_events(cluster, "ModelCacheFailed")) == 2  # one per failed attempt
    finally:
        await operator.stop()


async def test_a_retained_claim_outlives_the_deployment_and_is_adopted_again(cluster,
                                                                            operator):
    await request(cluster, "POST", llmd_path(), manifest("chat", {"model": MODEL}))
    claim = await wait_until(lambda: live(cluster, CLAIMS, NS, "chat-model-cache"),
                             what="the claim", log=operator.log)
    await request(cluster, "DELETE", llmd_path("chat"))
    await wait_until(lambda: live(cluster, LLMD, NS, "chat") is None, what="deleted",
                     log=operator.log)
    kept = live(cluster, CLAIMS, NS, "chat-model-cache")
    assert kept["metadata"]["uid"] == claim["metadata"]["uid"]
    assert not kept["metadata"].get("ownerReferences")  # the garbage collector leaves it
    assert kept["metadata"]["annotations"][mc.RETAINED_FROM_ANNOTATION] == "chat"
    assert _jobs(cluster) == []

    await request(cluster, "POST", llmd_path(), manifest("chat", {"model": MODEL}))
    uid = (await wait_until(lambda: live(cluster, LLMD, NS, "chat"), log=operator.log)
           )["metadata"]["uid"]
    adopted = await wait_until(
        lambda: (c := live(cluster, CLAIMS, NS, "chat-model-cache"))
        and c["metadata"].get("ownerReferences") and c, what="adopted", log=operator.log)
    assert adopted["metadata"]["uid"] == claim["metadata"]["uid"]
    assert adopted["metadata"]["ownerReferences"][0]["uid"] == uid
    assert mc.RETAINED_FROM_ANNOTATION not in adopted["metadata"].get("annotations", {})

    # whenDeleted: Delete, and the claim goes with the LLMDeployment.
    await request(cluster, "PATCH", llmd_path("chat"),
                  {"spec": {"model": {"cache": {"whenDeleted": "Delete"}}}})
    await wait_until(lambda: live(cluster, CLAIMS, NS, "chat-model-cache")["metadata"]
                     ["annotations"].get(mc.WHEN_DELETED_ANNOTATION) == "Delete",
                     what="policy recorded on the claim", log=operator.log)
    await request(cluster, "DELETE", llmd_path("chat"))
    await wait_until(lambda: live(cluster, CLAIMS, NS, "chat-model-cache") is None,
                     what="claim deleted", log=operator.log)


async def test_a_missing_user_claim_is_degraded_until_it_exists(cluster, operator):
    model = {**MODEL, "cache": {"claimName": "shared-weights", "accessMode": "ReadWriteMany"}}
    await request(cluster, "POST", llmd_path(), manifest("chat", {"model": model}))
    await wait_until(lambda: condition(cluster, "chat", "Degraded").get("reason")
                     == "ClaimNotFound", what="ClaimNotFound", log=operator.log)
    assert "shared-weights" in condition(cluster, "chat", "Degraded")["message"]
    assert _jobs(cluster) == []
    await request(cluster, "POST", f"/api/v1/namespaces/{NS}/persistentvolumeclaims", {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "shared-weights", "namespace": NS},
        "spec": {"accessModes": ["ReadWriteMany"],
                 "resources": {"requests": {"storage": "100Gi"}}}})
    [job] = await wait_until(lambda: _jobs(cluster), what="the loader Job", log=operator.log)
    assert job["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"] == \
        {"claimName": "shared-weights"}
    await request(cluster, "DELETE", llmd_path("chat"))
    await wait_until(lambda: live(cluster, LLMD, NS, "chat") is None, log=operator.log)
    user_claim = live(cluster, CLAIMS, NS, "shared-weights")
    assert user_claim is not None and not user_claim["metadata"].get("ownerReferences")
