"""The operator process against the kmock Kubernetes emulator: the issue's scenarios.

Each test starts `kubellm operator` (through `python -m kubellm.runtime`) against an
emulated API server, acts on it over HTTP like kubectl would, and waits for the result.
"""
from __future__ import annotations

import asyncio
import signal
from typing import Any

from .emulator import LLMD, live, live_all
from .harness import OperatorProcess, wait_until

from kubellm.operator.resources import API_VERSION, KIND

NS = "team-a"
DEPLOYMENTS, SERVICES, STATEFULSETS = "apps/v1/deployments", "v1/services", "apps/v1/statefulsets"
EVENTS = "v1/events"


def llmd_path(name: str = "", sub: str = "") -> str:
    path = f"/apis/{API_VERSION}/namespaces/{NS}/llmdeployments"
    return path + (f"/{name}" if name else "") + (f"/{sub}" if sub else "")


def manifest(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": KIND,
            "metadata": {"name": name, "namespace": NS}, "spec": spec}


HF_SPEC = {"model": {"source": {"huggingFace": "Qwen/Qwen2.5-0.5B-Instruct"}},
           "parallelism": {"tensor": 2}}


async def request(cluster: Any, method: str, path: str, body: Any = None) -> dict:
    headers = {"Content-Type": "application/merge-patch+json"} if method == "PATCH" else {}
    async with cluster.request(method, path, json=body, headers=headers) as resp:
        assert resp.status < 400, f"{method} {path}: {resp.status} {await resp.text()}"
        return await resp.json()


def container(deployment: dict) -> dict:
    return deployment["spec"]["template"]["spec"]["containers"][0]


def llmd_status(cluster: Any, name: str) -> dict:
    return (live(cluster, LLMD, NS, name) or {}).get("status") or {}


def condition(cluster: Any, name: str, type_: str) -> dict:
    return next((c for c in llmd_status(cluster, name).get("conditions", [])
                 if c["type"] == type_), {})


async def wait_deployment(cluster: Any, operator: OperatorProcess, name: str,
                          check=lambda d: True, what: str = "deployment") -> dict:
    return await wait_until(
        lambda: (d := live(cluster, DEPLOYMENTS, NS, name)) and check(d) and d,
        what=what, log=operator.log)


async def test_apply_creates_owned_children_and_status(cluster, operator):
    cr = await request(cluster, "POST", llmd_path(), manifest("chat", HF_SPEC))
    uid = cr["metadata"]["uid"]
    dep = await wait_deployment(cluster, operator, "chat")
    svc = await wait_until(lambda: live(cluster, SERVICES, NS, "chat"), log=operator.log)
    for child in (dep, svc):
        (ref,) = child["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == \
            (KIND, "chat", uid, True)
    assert container(dep)["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert container(dep)["args"][:2] == ["serve", "Qwen/Qwen2.5-0.5B-Instruct"]
    assert container(dep)["image"] == "kubellm:test"
    assert svc["spec"]["selector"]["kubellm.io/role"] == "leader"

    status = await wait_until(lambda: llmd_status(cluster, "chat").get("phase"),
                              log=operator.log) and llmd_status(cluster, "chat")
    assert status["phase"] == "Progressing"
    assert status["endpoint"] == f"http://chat.{NS}.svc:8000/v1"
    assert status["observedGeneration"] == 1
    assert status["selector"] == ("app.kubernetes.io/instance=chat,"
                                  "app.kubernetes.io/name=kubellm,kubellm.io/role=leader")

    # The Deployment controller reports the pod ready -> the LLMDeployment turns Ready.
    await request(cluster, "PATCH", f"/apis/apps/v1/namespaces/{NS}/deployments/chat/status",
                  {"status": {"replicas": 1, "readyReplicas": 1, "updatedReplicas": 1,
                              "observedGeneration": 1}})
    await wait_until(lambda: llmd_status(cluster, "chat").get("phase") == "Ready",
                     what="phase Ready", log=operator.log)
    assert condition(cluster, "chat", "Ready")["status"] == "True"
    assert llmd_status(cluster, "chat")["readyReplicas"] == 1


async def test_edits_to_the_cr_patch_the_children(cluster, operator):
    await request(cluster, "POST", llmd_path(), manifest("chat", HF_SPEC))
    await wait_deployment(cluster, operator, "chat")
    await request(cluster, "PATCH", llmd_path("chat"), {"spec": {
        "model": {"source": {"huggingFace": "Qwen/Qwen3-0.6B"}, "maxModelLen": 4096},
        "replicas": 3,
        "engine": {"maxNumSeqs": 64, "enablePrefixCaching": False}}})
    dep = await wait_deployment(cluster, operator, "chat", lambda d: d["spec"]["replicas"] == 3,
                                "replicas 3")
    args = container(dep)["args"]
    assert args[1] == "Qwen/Qwen3-0.6B"
    assert args[args.index("--max-model-len") + 1] == "4096"
    assert args[args.index("--max-num-seqs") + 1] == "64"
    assert "--no-enable-prefix-caching" in args
    await wait_until(lambda: llmd_status(cluster, "chat").get("observedGeneration") == 2,
                     what="observedGeneration 2", log=operator.log)


async def test_scale_subresource_drives_replicas(cluster, operator):
    await request(cluster, "POST", llmd_path(), manifest("chat", HF_SPEC))
    await wait_deployment(cluster, operator, "chat")
    # What `kubectl scale llmd/chat --replicas 4` sends.
    await request(cluster, "PATCH", llmd_path("chat", "scale"), {"spec": {"replicas": 4}})
    await wait_deployment(cluster, operator, "chat", lambda d: d["spec"]["replicas"] == 4,
                          "replicas 4")


async def test_deleted_or_edited_children_are_restored(cluster, operator):
    await request(cluster, "POST", llmd_path(), manifest("chat", HF_SPEC))
    dep = await wait_deployment(cluster, operator, "chat")
    await wait_until(lambda: live(cluster, SERVICES, NS, "chat"), log=operator.log)
    uid_before = dep["metadata"]["uid"]

    await request(cluster, "DELETE", f"/apis/apps/v1/namespaces/{NS}/deployments/chat")
    await wait_deployment(cluster, operator, "chat",
                          lambda d: d["metadata"]["uid"] != uid_before, "recreated deployment")

    await request(cluster, "DELETE", f"/api/v1/namespaces/{NS}/services/chat")
    await wait_until(lambda: live(cluster, SERVICES, NS, "chat"), what="recreated service",
                     log=operator.log)

    # A hand edit of a field the operator owns is reverted.
    await request(cluster, "PATCH", f"/apis/apps/v1/namespaces/{NS}/deployments/chat",
                  {"spec": {"replicas": 7}})
    await wait_deployment(cluster, operator, "chat", lambda d: d["spec"]["replicas"] == 1,
                          "replicas restored to 1")


async def test_invalid_spec_is_degraded_with_an_event(cluster, operator):
    bad = {"model": {"source": {"huggingFace": "a/b"}},
           "parallelism": {"tensor": 16, "gpusPerNode": 8}}
    await request(cluster, "POST", llmd_path(), manifest("huge", bad))
    await wait_until(lambda: llmd_status(cluster, "huge").get("phase") == "Degraded",
                     what="phase Degraded", log=operator.log)
    degraded = condition(cluster, "huge", "Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "InvalidSpec"
    assert "spec.parallelism.tensor" in degraded["message"]
    events = await wait_until(lambda: [e for e in live_all(cluster, EVENTS, NS)
                                       if e["involvedObject"]["name"] == "huge"],
                              what="an Event", log=operator.log)
    assert (events[0]["type"], events[0]["reason"]) == ("Warning", "InvalidSpec")
    assert "spec.parallelism.tensor" in events[0]["message"]
    assert live(cluster, DEPLOYMENTS, NS, "huge") is None

    # A schema violation the API server would have refused is also caught, not crashed on.
    await request(cluster, "POST", llmd_path(), manifest("typo", {
        "model": {"source": {"huggingFace": "a/b"}}, "parallelism": {"tensor": 0}}))
    await wait_until(lambda: "spec.parallelism.tensor" in
                     condition(cluster, "typo", "Degraded").get("message", ""),
                     what="Degraded for tensor 0", log=operator.log)

    # Fixing the spec clears Degraded and creates the children.
    await request(cluster, "PATCH", llmd_path("huge"), {"spec": {"parallelism": {"tensor": 8}}})
    await wait_deployment(cluster, operator, "huge")
    await wait_until(lambda: condition(cluster, "huge", "Degraded").get("status") == "False",
                     what="Degraded False", log=operator.log)


async def test_deleting_the_cr_removes_its_children(cluster, operator):
    await request(cluster, "POST", llmd_path(), manifest("chat", HF_SPEC))
    await wait_deployment(cluster, operator, "chat")
    await wait_until(lambda: live(cluster, SERVICES, NS, "chat"), log=operator.log)
    await request(cluster, "DELETE", llmd_path("chat"))
    await wait_until(lambda: live(cluster, LLMD, NS, "chat") is None, what="CR gone",
                     log=operator.log)
    await wait_until(lambda: live(cluster, DEPLOYMENTS, NS, "chat") is None
                     and live(cluster, SERVICES, NS, "chat") is None,
                     what="children gone", log=operator.log)


async def test_multi_node_groups_follow_replicas(cluster, operator):
    spec = {"model": {"source": {"pvc": {"claimName": "weights", "path": "llama-70b"}}},
            "parallelism": {"tensor": 8, "pipeline": 2}, "replicas": 2}
    await request(cluster, "POST", llmd_path(), manifest("big", spec))
    groups = await wait_until(lambda: [live(cluster, STATEFULSETS, NS, f"big-g{i}")
                                       for i in (0, 1)] if all(
        live(cluster, STATEFULSETS, NS, f"big-g{i}") for i in (0, 1)) else None,
        what="two group StatefulSets", log=operator.log)
    assert live(cluster, SERVICES, NS, "big-pods")["spec"]["clusterIP"] == "None"
    assert live(cluster, DEPLOYMENTS, NS, "big") is None
    env = {e["name"]: e.get("value") for e in container(groups[1])["env"]}
    assert env["KUBELLM_MASTER_ADDR"] == f"big-g1-0.big-pods.{NS}.svc"
    assert groups[1]["spec"]["replicas"] == 2

    await request(cluster, "PATCH", llmd_path("big", "scale"), {"spec": {"replicas": 1}})
    await wait_until(lambda: live(cluster, STATEFULSETS, NS, "big-g1") is None,
                     what="group 1 pruned", log=operator.log)
    assert live(cluster, STATEFULSETS, NS, "big-g0") is not None


async def test_restart_half_way_creates_no_duplicates(cluster, tmp_path):
    first = OperatorProcess(cluster.kubeconfig, tmp_path / "op1.log", [])
    await first.start()
    try:
        await request(cluster, "POST", llmd_path(), manifest("chat", HF_SPEC))
        await wait_deployment(cluster, first, "chat")
    finally:
        first.process.send_signal(signal.SIGKILL)  # a crash: no graceful shutdown
        await first.process.wait()
    # While no operator runs: the spec changes and a child disappears.
    await request(cluster, "PATCH", llmd_path("chat"), {"spec": {"replicas": 2}})
    await request(cluster, "DELETE", f"/api/v1/namespaces/{NS}/services/chat")

    second = OperatorProcess(cluster.kubeconfig, tmp_path / "op2.log", [])
    await second.start()
    try:
        await wait_deployment(cluster, second, "chat", lambda d: d["spec"]["replicas"] == 2,
                              "replicas 2 after restart")
        await wait_until(lambda: live(cluster, SERVICES, NS, "chat"), log=second.log)
        await asyncio.sleep(2.5)  # a couple of resync passes must not create anything
    finally:
        await second.stop()
    created = [c for c in cluster.creations if c[0] in ("deployments", "services")]
    # One Deployment ever; the Service twice (created, then re-created after its deletion).
    assert sorted(created) == [("deployments", NS, "chat"), ("services", NS, "chat"),
                               ("services", NS, "chat")]


async def test_liveness_endpoint_and_structured_logs(cluster, tmp_path):
    import json
    import socket

    import aiohttp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = OperatorProcess(cluster.kubeconfig, tmp_path / "json.log", [])
    proc.extra_args = ["--liveness-port", str(port), "--log-format", "json"]
    await proc.start()
    try:
        async def healthy() -> bool:
            try:
                async with aiohttp.ClientSession() as session, \
                        session.get(f"http://127.0.0.1:{port}/healthz") as resp:
                    return resp.status == 200
            except aiohttp.ClientError:
                return False
        await wait_until(healthy, what="/healthz 200", log=proc.log)
        await request(cluster, "POST", llmd_path(), manifest("chat", HF_SPEC))
        await wait_deployment(cluster, proc, "chat")
    finally:
        await proc.stop()
    records = [json.loads(line) for line in proc.log().splitlines() if line.startswith("{")]
    assert any(r.get("message") == f"llmd/{NS}/chat: created Deployment/chat" for r in records), proc.log()


async def test_status_writes_spare_the_autoscalers_fields(cluster, operator):
    await request(cluster, "POST", llmd_path(), manifest("chat", HF_SPEC))
    await wait_until(lambda: llmd_status(cluster, "chat").get("phase"), log=operator.log)
    autoscaler = {"queueDepth": 17.5, "desiredReplicas": 3,
                  "lastScaleTime": "2026-01-01T00:00:00Z",
                  "autoscaler": {"window": [[0, 17.5]]},
                  "conditions": llmd_status(cluster, "chat")["conditions"] + [
                      {"type": "ScalingActive", "status": "True", "reason": "QueueDepth",
                       "message": "scraping 1 pod"}]}
    await request(cluster, "PATCH", llmd_path("chat", "status"), {"status": autoscaler})
    # A child changes -> the operator rewrites its own fields.
    await request(cluster, "PATCH", f"/apis/apps/v1/namespaces/{NS}/deployments/chat/status",
                  {"status": {"replicas": 1, "readyReplicas": 1, "updatedReplicas": 1}})
    await wait_until(lambda: llmd_status(cluster, "chat").get("phase") == "Ready",
                     what="phase Ready", log=operator.log)
    await asyncio.sleep(2 * 1.0)  # and a couple of resync passes
    status = llmd_status(cluster, "chat")
    for key in ("queueDepth", "desiredReplicas", "lastScaleTime", "autoscaler"):
        assert status[key] == autoscaler[key]
    # (The real autoscaler, when installed, may rewrite ScalingActive itself.)
    assert condition(cluster, "chat", "ScalingActive")["status"] in ("True", "False")
    assert condition(cluster, "chat", "Ready")["status"] == "True"


async def test_leader_worker_set_when_its_crd_is_served(cluster, tmp_path):
    cluster.resources["leaderworkerset.x-k8s.io/v1/leaderworkersets"] = cluster.ResourceInfo(
        kind="LeaderWorkerSet", namespaced=True, verbs={"list", "get", "create", "patch"})
    proc = OperatorProcess(cluster.kubeconfig, tmp_path / "lws.log", [])
    await proc.start()
    try:
        spec = {"model": {"source": {"huggingFace": "org/big"}},
                "parallelism": {"tensor": 8, "pipeline": 2}, "replicas": 2}
        await request(cluster, "POST", llmd_path(), manifest("big", spec))
        lws = await wait_until(
            lambda: live(cluster, "leaderworkerset.x-k8s.io/v1/leaderworkersets", NS, "big"),
            what="LeaderWorkerSet", log=proc.log)
    finally:
        await proc.stop()
    assert lws["spec"]["replicas"] == 2
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    assert live(cluster, STATEFULSETS, NS, "big-g0") is None


async def test_namespace_flag_restricts_the_operator(cluster, tmp_path):
    proc = OperatorProcess(cluster.kubeconfig, tmp_path / "ns.log", ["--namespace", NS])
    await proc.start()
    try:
        other = manifest("elsewhere", HF_SPEC)
        other["metadata"]["namespace"] = "team-b"
        await request(cluster, "POST", llmd_path().replace(NS, "team-b"), other)
        await request(cluster, "POST", llmd_path(), manifest("chat", HF_SPEC))
        await wait_deployment(cluster, proc, "chat")
        await asyncio.sleep(1.5)  # a resync pass later, team-b is still untouched
    finally:
        await proc.stop()
    assert live(cluster, DEPLOYMENTS, "team-b", "elsewhere") is None


async def test_a_child_the_api_rejects_is_degraded_then_recovers(cluster, operator):
    rejection = 'Deployment.apps "chat" is invalid: spec.template.spec.nodeSelector: Invalid'
    cluster.rejections["deployments"] = rejection
    await request(cluster, "POST", llmd_path(), manifest("chat", HF_SPEC))
    await wait_until(lambda: condition(cluster, "chat", "Degraded").get("reason")
                     == "ApplyFailed", what="Degraded ApplyFailed", log=operator.log)
    assert rejection in condition(cluster, "chat", "Degraded")["message"]
    assert operator.process.returncode is None  # no crash loop
    del cluster.rejections["deployments"]
    await wait_deployment(cluster, operator, "chat")  # the next resync pass succeeds
    await wait_until(lambda: condition(cluster, "chat", "Degraded").get("status") == "False",
                     what="Degraded False", log=operator.log)
