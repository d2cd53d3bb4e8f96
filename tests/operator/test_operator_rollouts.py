"""Rollouts through the operator process and the emulated API server: why a rollout
waits (a Pending surge pod), and multi-node groups changed one group at a time."""
from __future__ import annotations

import asyncio

from .emulator import live
from .harness import wait_until
from .test_operator_emulated import (NS, STATEFULSETS, condition, llmd_path, manifest,
                                     request, wait_deployment)

SPEC = {"model": {"source": {"huggingFace": "Qwen/Qwen2.5-7B-Instruct"}}}
UNSCHEDULABLE = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."


async def _deployment_status(cluster, status: dict) -> None:
    await request(cluster, "PATCH", f"/apis/apps/v1/namespaces/{NS}/deployments/chat/status",
                  {"status": status})


async def test_a_surge_pod_without_a_gpu_is_named_in_the_status(cluster, operator):
    await request(cluster, "POST", llmd_path(), manifest("chat", SPEC))
    dep = await wait_deployment(cluster, operator, "chat")
    assert dep["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    # Mid-rollout: the old pod serves, the surge pod waits for a GPU.
    await _deployment_status(cluster, {"replicas": 2, "readyReplicas": 1,
                                       "updatedReplicas": 1, "observedGeneration": 1})
    labels = dep["spec"]["template"]["metadata"]["labels"]
    await request(cluster, "POST", f"/api/v1/namespaces/{NS}/pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "chat-7d9-surge", "namespace": NS, "labels": labels},
        "spec": {"containers": [{"name": "runtime", "image": "img"}]},
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "message": UNSCHEDULABLE}]}})
    progressing = await wait_until(
        lambda: (c := condition(cluster, "chat", "Progressing")).get("reason")
        == "PodsUnschedulable" and c, what="PodsUnschedulable", log=operator.log)
    assert f"pod chat-7d9-surge is Pending: {UNSCHEDULABLE}" in progressing["message"]
    assert "maxUnavailable: 1" in progressing["message"]
    assert condition(cluster, "chat", "Ready")["status"] == "True"  # still serving

    await request(cluster, "DELETE", f"/api/v1/namespaces/{NS}/pods/chat-7d9-surge")
    await _deployment_status(cluster, {"replicas": 1, "readyReplicas": 1,
                                       "updatedReplicas": 1, "observedGeneration": 1})
    await wait_until(lambda: condition(cluster, "chat", "Progressing").get("reason")
                     == "RolloutComplete", what="RolloutComplete", log=operator.log)


def _group(cluster, index: int) -> dict:
    return live(cluster, STATEFULSETS, NS, f"chat-g{index}")


async def _group_ready(cluster, index: int) -> None:
    generation = _group(cluster, index)["metadata"]["generation"]
    await request(cluster, "PATCH", f"/apis/apps/v1/namespaces/{NS}/statefulsets/"
                  f"chat-g{index}/status", {"status": {
                      "replicas": 2, "readyReplicas": 2, "updatedReplicas": 2,
                      "observedGeneration": generation}})


def _max_num_seqs(group: dict) -> str | None:
    args = group["spec"]["template"]["spec"]["containers"][0]["args"]
    return args[args.index("--max-num-seqs") + 1] if "--max-num-seqs" in args else None


async def test_multi_node_groups_change_one_at_a_time(cluster, operator):
    spec = {**SPEC, "parallelism": {"tensor": 8, "pipeline": 2},
            "model": {**SPEC["model"]}, "replicas": 2}
    await request(cluster, "POST", llmd_path(), manifest("chat", spec))
    await wait_until(lambda: _group(cluster, 0) and _group(cluster, 1), what="two groups",
                     log=operator.log)
    for index in (0, 1):
        await _group_ready(cluster, index)
    await request(cluster, "PATCH", llmd_path("chat"), {"spec": {"engine": {"maxNumSeqs": 64}}})
    await wait_until(lambda: _max_num_seqs(_group(cluster, 0)) == "64",
                     what="group 0 changed", log=operator.log)
    await asyncio.sleep(2.5)  # resync passes: group 1 waits while group 0 restarts
    assert _max_num_seqs(_group(cluster, 1)) is None
    await _group_ready(cluster, 0)
    await wait_until(lambda: _max_num_seqs(_group(cluster, 1)) == "64",
                     what="group 1 changed", log=operator.log)


async def test_the_disruption_budget_comes_and_goes_with_a_second_replica(cluster, operator):
    pdbs = "policy/v1/poddisruptionbudgets"
    await request(cluster, "POST", llmd_path(), manifest("chat", {**SPEC, "replicas": 2}))
    pdb = await wait_until(lambda: live(cluster, pdbs, NS, "chat"), what="the budget",
                           log=operator.log)
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["metadata"]["ownerReferences"][0]["controller"] is True
    # One replica: a budget would block every drain of its node.
    await request(cluster, "PATCH", llmd_path("chat"), {"spec": {"replicas": 1}})
    await wait_until(lambda: live(cluster, pdbs, NS, "chat") is None, what="budget pruned",
                     log=operator.log)
