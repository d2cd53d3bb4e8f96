"""spec.routing and scale from zero through the operator process and the emulated API
server: the InferencePool and Endpoint Picker objects and their status, the message when
the CRD is missing, and the Service (and pool) switched to the activator while no replica
is ready, with the cold start reported."""
from __future__ import annotations

from .emulator import POOLS, live, live_all, serve_inference_pools
from .harness import OperatorProcess, wait_until
from .test_operator_emulated import (DEPLOYMENTS, EVENTS, NS, SERVICES, condition, llmd_path,
                                     llmd_status, manifest, request)

MODEL = {"source": {"huggingFace": "Qwen/Qwen2.5-0.5B-Instruct"}}
EPP_KINDS = {"v1/configmaps": "chat-epp", "v1/serviceaccounts": "chat-epp",
             "rbac.authorization.k8s.io/v1/roles": "chat-epp",
             "rbac.authorization.k8s.io/v1/rolebindings": "chat-epp",
             DEPLOYMENTS: "chat-epp", SERVICES: "chat-epp", POOLS: "chat"}
SERVING = {"app.kubernetes.io/instance": "chat", "app.kubernetes.io/name": "kubellm",
           "kubellm.io/role": "leader"}
# The serving selector's keys, the activator's values: a switch changes values only.
ACTIVATOR = {"app.kubernetes.io/name": "kubellm-activator",
             "app.kubernetes.io/instance": "chat", "kubellm.io/role": "activator"}


async def test_routing_builds_the_pool_and_picker_and_reports_them(cluster, tmp_path):
    serve_inference_pools(cluster)
    operator = OperatorProcess(cluster.kubeconfig, tmp_path / "op.log",
                               ["--epp-image", "epp:test"])
    await operator.start()
    try:
        await request(cluster, "POST", llmd_path(), manifest(
            "chat", {"model": MODEL, "routing": {"enabled": True}}))
        uid = (await wait_until(lambda: live(cluster, POOLS, NS, "chat"), what="the pool",
                                log=operator.log))["metadata"]["ownerReferences"][0]["uid"]
        for resource, name in EPP_KINDS.items():
            child = await wait_until(lambda: live(cluster, resource, NS, name),
                                     what=f"{resource}/{name}", log=operator.log)
            assert child["metadata"]["ownerReferences"][0]["uid"] == uid, resource
        epp = live(cluster, DEPLOYMENTS, NS, "chat-epp")
        assert epp["spec"]["template"]["spec"]["containers"][0]["image"] == "epp:test"
        routing = await wait_until(lambda: condition(cluster, "chat", "Routing"),
                                   what="Routing", log=operator.log)
        assert (routing["status"], routing["reason"]) == ("False", "EndpointPickerNotReady")
        assert llmd_status(cluster, "chat")["routing"] == {
            "inferencePool": "chat", "endpointPicker": f"chat-epp.{NS}.svc:9002"}
        # The serving Deployment's status is not the picker's (and the reverse).
        assert llmd_status(cluster, "chat")["readyReplicas"] == 0
        await request(cluster, "PATCH", f"/apis/apps/v1/namespaces/{NS}/deployments/chat-epp"
                      "/status", {"status": {"replicas": 1, "readyReplicas": 1}})
        await wait_until(lambda: condition(cluster, "chat", "Routing").get("status") == "True",
                         what="Routing True", log=operator.log)
        assert llmd_status(cluster, "chat")["readyReplicas"] == 0

        # Routing off: the pool and the picker go, the Service stays.
        await request(cluster, "PATCH", llmd_path("chat"), {"spec": {"routing": {
            "enabled": False}}})
        for resource, name in EPP_KINDS.items():
            await wait_until(lambda: live(cluster, resource, NS, name) is None,
                             what=f"{resource}/{name} pruned", log=operator.log)
        await wait_until(lambda: not condition(cluster, "chat", "Routing"),
                         what="no Routing condition", log=operator.log)
        assert "routing" not in llmd_status(cluster, "chat")
        assert live(cluster, SERVICES, NS, "chat") is not None
    finally:
        await operator.stop()


async def test_without_the_pool_crd_the_service_serves_and_status_says_why(cluster, operator):
    await request(cluster, "POST", llmd_path(), manifest(
        "chat", {"model": MODEL, "routing": {"enabled": True}}))
    routing = await wait_until(lambda: condition(cluster, "chat", "Routing"),
                               what="Routing", log=operator.log)
    assert (routing["status"], routing["reason"]) == ("False", "InferencePoolUnavailable")
    assert "Gateway API Inference Extension" in routing["message"]
    assert live(cluster, SERVICES, NS, "chat")["spec"]["selector"] == SERVING
    assert live(cluster, DEPLOYMENTS, NS, "chat-epp") is None
    assert condition(cluster, "chat", "Degraded")["status"] == "False"


async def test_scale_from_zero_goes_through_the_activator(cluster, tmp_path):
    serve_inference_pools(cluster)
    # The reconciler alone: the test plays the autoscaler (and the kubelet).
    operator = OperatorProcess(cluster.kubeconfig, tmp_path / "op.log",
                               ["--controllers", "reconciler", "--activator-image", "op:test"])
    await operator.start()
    try:
        spec = {"model": MODEL, "replicas": 0, "routing": {"enabled": True},
                "autoscaling": {"enabled": True, "minReplicas": 0, "maxReplicas": 3}}
        await request(cluster, "POST", llmd_path(), manifest("chat", spec))
        activator = await wait_until(lambda: live(cluster, DEPLOYMENTS, NS, "chat-activator"),
                                     what="the activator", log=operator.log)
        assert activator["spec"]["template"]["spec"]["containers"][0]["image"] == "op:test"
        ready = await wait_until(lambda: live(cluster, SERVICES, NS, "chat-ready"),
                                 what="the ready Service", log=operator.log)
        assert ready["spec"]["selector"] == SERVING
        # At zero: the Service and the pool point at the activator.
        await wait_until(lambda: live(cluster, SERVICES, NS, "chat")["spec"]["selector"]
                         == ACTIVATOR, what="Service -> activator", log=operator.log)
        await wait_until(lambda: live(cluster, POOLS, NS, "chat")["spec"]["selector"]
                         ["matchLabels"] == ACTIVATOR, what="pool -> activator",
                         log=operator.log)
        await wait_until(lambda: llmd_status(cluster, "chat").get("replicas") == 0,
                         what="status at zero", log=operator.log)

        # A held request made the autoscaler ask for a replica: the cold start begins.
        await request(cluster, "PATCH", llmd_path("chat", "scale"), {"spec": {"replicas": 1}})
        await wait_until(lambda: llmd_status(cluster, "chat").get("coldStart", {})
                         .get("startedAt"), what="coldStart.startedAt", log=operator.log)
        assert live(cluster, SERVICES, NS, "chat")["spec"]["selector"] == ACTIVATOR
        # The replica turns Ready: requests go to it directly again.
        await request(cluster, "PATCH", f"/apis/apps/v1/namespaces/{NS}/deployments/chat/status",
                      {"status": {"replicas": 1, "readyReplicas": 1, "updatedReplicas": 1,
                                  "observedGeneration": 2}})
        await wait_until(lambda: live(cluster, SERVICES, NS, "chat")["spec"]["selector"]
                         == SERVING, what="Service -> replicas", log=operator.log)
        await wait_until(lambda: live(cluster, POOLS, NS, "chat")["spec"]["selector"]
                         ["matchLabels"] == SERVING, what="pool -> replicas", log=operator.log)
        cold = await wait_until(lambda: (c := llmd_status(cluster, "chat").get("coldStart", {}))
                                .get("lastSeconds") is not None and c, what="coldStart",
                                log=operator.log)
        assert "startedAt" not in cold and cold["lastSeconds"] >= 0 and cold["lastReadyAt"]
        await wait_until(lambda: [e for e in live_all(cluster, EVENTS, NS)
                                  if e["reason"] == "ColdStart"], what="a ColdStart Event",
                         log=operator.log)

        # Scaled to zero again: the activator takes the Service back at once.
        await request(cluster, "PATCH", llmd_path("chat", "scale"), {"spec": {"replicas": 0}})
        await wait_until(lambda: live(cluster, SERVICES, NS, "chat")["spec"]["selector"]
                         == ACTIVATOR, what="Service -> activator again", log=operator.log)

        # No more scale to zero: the activator and its Service go, the replicas serve.
        await request(cluster, "PATCH", llmd_path("chat"), {"spec": {
            "replicas": 1, "autoscaling": {"minReplicas": 1}}})
        for resource, name in ((DEPLOYMENTS, "chat-activator"), (SERVICES, "chat-ready")):
            await wait_until(lambda: live(cluster, resource, NS, name) is None,
                             what=f"{resource}/{name} pruned", log=operator.log)
        await wait_until(lambda: live(cluster, SERVICES, NS, "chat")["spec"]["selector"]
                         == SERVING, what="Service -> replicas for good", log=operator.log)
    finally:
        await operator.stop()
