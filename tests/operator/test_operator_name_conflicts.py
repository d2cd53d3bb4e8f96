"""An object that already has a child's name is never taken over (the emulated API server).

For every kind of child: a user's own object of that name stays exactly as it was (no
patch, no delete, not even when the LLMDeployment is deleted), the LLMDeployment turns
Degraded with reason NameConflict naming the object and says so in an Event, and it
recovers by itself once the object is gone.
"""
from __future__ import annotations

import asyncio

import pytest

from kubellm.operator.builders import model_cache as mc
from kubellm.operator.validation import defaulted_spec

from .emulator import LLMD, POOLS, live, live_all, serve_inference_pools
from .harness import OperatorProcess, wait_until
from .test_operator_emulated import (EVENTS, NS, condition, llmd_path, manifest, request)

LWS = "leaderworkerset.x-k8s.io/v1/leaderworkersets"
SINGLE = {"model": {"source": {"huggingFace": "org/model"}}}
MULTI = {"model": {"source": {"huggingFace": "org/big"}},
         "parallelism": {"tensor": 8, "pipeline": 2}}
CACHED = {"model": {"source": {"huggingFace": "org/model-1B"}, "cache": {}}}
# The loader Job's name: its cache key hashes the LLMDeployment's name, claim and model.
LOADER_JOB = mc.job_name("chat", mc.cache_plan(
    {"metadata": {"name": "chat"}}, defaulted_spec(CACHED)).key, 1)
ROUTED = {**SINGLE, "routing": {"enabled": True}}
USER_LABELS = {"app": "web"}
POD_TEMPLATE = {"metadata": {"labels": USER_LABELS},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]}}


def _user_object(kind: str, name: str) -> tuple[str, str, dict]:
    """(resource, collection path, body) of a user's object that is not kubellm's."""
    meta = {"name": name, "namespace": NS, "labels": USER_LABELS}
    if kind == "Deployment":
        return ("apps/v1/deployments", f"/apis/apps/v1/namespaces/{NS}/deployments",
                {"apiVersion": "apps/v1", "kind": kind, "metadata": meta,
                 "spec": {"replicas": 2, "selector": {"matchLabels": USER_LABELS},
                          "template": POD_TEMPLATE}})
    if kind == "StatefulSet":
        return ("apps/v1/statefulsets", f"/apis/apps/v1/namespaces/{NS}/statefulsets",
                {"apiVersion": "apps/v1", "kind": kind, "metadata": meta,
                 "spec": {"replicas": 1, "serviceName": "web",
                          "selector": {"matchLabels": USER_LABELS}, "template": POD_TEMPLATE}})
    if kind == "Service":
        return ("v1/services", f"/api/v1/namespaces/{NS}/services",
                {"apiVersion": "v1", "kind": kind, "metadata": meta,
                 "spec": {"selector": USER_LABELS, "ports": [{"port": 80}]}})
    if kind == "NetworkPolicy":
        return ("networking.k8s.io/v1/networkpolicies",
                f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies",
                {"apiVersion": "networking.k8s.io/v1", "kind": kind, "metadata": meta,
                 "spec": {"podSelector": {"matchLabels": USER_LABELS},
                          "policyTypes": ["Ingress"]}})
    if kind == "PersistentVolumeClaim":
        return ("v1/persistentvolumeclaims", f"/api/v1/namespaces/{NS}/persistentvolumeclaims",
                {"apiVersion": "v1", "kind": kind, "metadata": meta,
                 "spec": {"accessModes": ["ReadWriteOnce"],
                          "resources": {"requests": {"storage": "1Gi"}}}})
    if kind == "PodDisruptionBudget":
        return ("policy/v1/poddisruptionbudgets",
                f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets",
                {"apiVersion": "policy/v1", "kind": kind, "metadata": meta,
                 "spec": {"minAvailable": 1, "selector": {"matchLabels": USER_LABELS}}})
    if kind == "Job":
        return ("batch/v1/jobs", f"/apis/batch/v1/namespaces/{NS}/jobs",
                {"apiVersion": "batch/v1", "kind": kind, "metadata": meta,
                 "spec": {"template": {**POD_TEMPLATE, "spec": {
                     **POD_TEMPLATE["spec"], "restartPolicy": "Never"}}}})
    if kind == "InferencePool":
        return (POOLS, f"/apis/inference.networking.k8s.io/v1/namespaces/{NS}/inferencepools",
                {"apiVersion": "inference.networking.k8s.io/v1", "kind": kind,
                 "metadata": meta, "spec": {"selector": {"matchLabels": USER_LABELS},
                                            "targetPorts": [{"number": 80}]}})
    if kind in ("ConfigMap", "ServiceAccount"):
        plural = f"{kind.lower()}s"
        return (f"v1/{plural}", f"/api/v1/namespaces/{NS}/{plural}",
                {"apiVersion": "v1", "kind": kind, "metadata": meta,
                 **({"data": {"k": "v"}} if kind == "ConfigMap" else {})})
    if kind in ("Role", "RoleBinding"):
        plural = f"{kind.lower()}s"
        rbac = "rbac.authorization.k8s.io/v1"
        body = {"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]} \
            if kind == "Role" else {"roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                                "kind": "Role", "name": "web"},
                                    "subjects": [{"kind": "ServiceAccount", "name": "web",
                                                  "namespace": NS}]}
        return (f"{rbac}/{plural}", f"/apis/{rbac}/namespaces/{NS}/{plural}",
                {"apiVersion": rbac, "kind": kind, "metadata": meta, **body})
    if kind == "LeaderWorkerSet":
        return (LWS, f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{NS}/leaderworkersets",
                {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": kind, "metadata": meta,
                 "spec": {"replicas": 1, "leaderWorkerTemplate": {
                     "size": 2, "workerTemplate": POD_TEMPLATE}}})
    raise AssertionError(kind)


def _what_the_user_set(obj: dict) -> dict:
    meta = obj["metadata"]
    body = {k: v for k, v in obj.items() if k not in ("metadata", "status")}
    return {"labels": meta.get("labels"), "ownerReferences": meta.get("ownerReferences"),
            "body": body, "uid": meta["uid"]}


CASES = [  # (child kind, child name, LLMDeployment spec, LeaderWorkerSet served)
    ("Deployment", "chat", SINGLE, False),
    ("Service", "chat", SINGLE, False),
    ("StatefulSet", "chat-g0", MULTI, False),
    ("Service", "chat-pods", MULTI, False),  # the headless rendezvous Service
    ("LeaderWorkerSet", "chat", MULTI, True),
    ("NetworkPolicy", "chat", {**SINGLE, "networkPolicy": {"enabled": True}}, False),
    ("PodDisruptionBudget", "chat", {**SINGLE, "replicas": 2}, False),
    ("PersistentVolumeClaim", "chat-model-cache", CACHED, False),
    ("Job", LOADER_JOB, CACHED, False),
    # spec.routing (the InferencePool CRD served) and scale from zero.
    ("InferencePool", "chat", ROUTED, False),
    ("ConfigMap", "chat-epp", ROUTED, False),
    ("ServiceAccount", "chat-epp", ROUTED, False),
    ("Role", "chat-epp", ROUTED, False),
    ("RoleBinding", "chat-epp", ROUTED, False),
]


@pytest.mark.parametrize("kind, name, spec, lws", CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in CASES])
async def test_a_users_object_is_never_taken_over(cluster, tmp_path, kind, name, spec, lws):
    if spec is ROUTED:
        serve_inference_pools(cluster)
    if lws:
        cluster.resources[LWS] = cluster.ResourceInfo(
            kind="LeaderWorkerSet", namespaced=True,
            verbs={"list", "watch", "get", "create", "patch", "delete"})
    resource, collection, body = _user_object(kind, name)
    mine = _what_the_user_set(await request(cluster, "POST", collection, body))
    operator = OperatorProcess(cluster.kubeconfig, tmp_path / "operator.log", [])
    await operator.start()
    try:
        await request(cluster, "POST", llmd_path(), manifest("chat", spec))
        await wait_until(lambda: condition(cluster, "chat", "Degraded").get("reason")
                         == "NameConflict", what="Degraded NameConflict", log=operator.log)
        message = condition(cluster, "chat", "Degraded")["message"]
        assert f"{kind} {NS}/{name} already exists" in message
        assert condition(cluster, "chat", "Ready")["status"] == "False"
        await wait_until(lambda: [e for e in live_all(cluster, EVENTS, NS)
                                  if e["reason"] == "NameConflict"
                                  and f"{kind} {NS}/{name}" in e["message"]],
                         what="a NameConflict Event", log=operator.log)
        await asyncio.sleep(2.5)  # resync passes come and go: still not touched
        assert _what_the_user_set(live(cluster, resource, NS, name)) == mine

        # Deleting the LLMDeployment deletes only what it owns.
        await request(cluster, "DELETE", llmd_path("chat"))
        await wait_until(lambda: live(cluster, LLMD, NS, "chat") is None,
                         what="LLMDeployment gone", log=operator.log)
        assert _what_the_user_set(live(cluster, resource, NS, name)) == mine

        # Recovery: once the user's object is gone, the child is created and owned.
        await request(cluster, "POST", llmd_path(), manifest("chat", spec))
        await wait_until(lambda: condition(cluster, "chat", "Degraded").get("reason")
                         == "NameConflict", what="NameConflict again", log=operator.log)
        path = f"{collection}/{name}"
        await request(cluster, "DELETE", path)
        child = await wait_until(
            lambda: (obj := live(cluster, resource, NS, name))
            and obj["metadata"].get("ownerReferences") and obj,
            what=f"our own {kind}", log=operator.log)
        uid = live(cluster, LLMD, NS, "chat")["metadata"]["uid"]
        assert child["metadata"]["ownerReferences"][0]["uid"] == uid
        await wait_until(lambda: condition(cluster, "chat", "Degraded").get("status")
                         == "False", what="Degraded False", log=operator.log)
    finally:
        await operator.stop()
    assert operator.process.returncode in (0, -15), operator.log()[-3000:]
