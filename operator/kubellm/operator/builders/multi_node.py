"""Multi-node replicas: per replica a group of `pipeline` pods with `tensor` GPUs each.

With the LeaderWorkerSet CRD installed, one LeaderWorkerSet holds all groups; otherwise
each group is a StatefulSet, and one headless Service gives every pod a DNS name for the
torch.distributed rendezvous. Rank 0 (stage 0) serves HTTP.
"""
from __future__ import annotations

from typing import Any

from kubellm.operator import rendezvous as rdv
from kubellm.operator.builders.meta import (GROUP_LABEL, ROLE_LABEL, child_metadata,
                                            selector_labels)
from kubellm.operator.builders.model_cache import CachePlan
from kubellm.operator.builders.pod import Probes, pod_spec
from kubellm.operator.builders.rollout import leader_worker_set_strategy
from kubellm.operator.builders.scheduling import pod_metadata

LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
RENDEZVOUS_PORT = {"name": "rendezvous", "containerPort": rdv.DEFAULT_MASTER_PORT,
                   "protocol": "TCP"}


def headless_service_name(name: str) -> str:
    return f"{name}-pods"


def group_name(name: str, group: int) -> str:
    return f"{name}-g{group}"


def _rank_from_label(label: str) -> dict[str, Any]:
    return {"name": rdv.NODE_RANK,
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{label}']"}}}


def rendezvous_env(spec: dict[str, Any], master_addr: str, rank_label: str) -> list[dict]:
    par = spec["parallelism"]
    return [{"name": rdv.MASTER_ADDR, "value": master_addr},
            {"name": rdv.MASTER_PORT, "value": str(rdv.DEFAULT_MASTER_PORT)},
            {"name": rdv.NNODES, "value": str(par["pipeline"])},
            _rank_from_label(rank_label),
            {"name": rdv.NPROC_PER_NODE, "value": str(par["tensor"])}]


def build_headless_service(cr: dict[str, Any]) -> dict[str, Any]:
    name = cr["metadata"]["name"]
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": child_metadata(cr, headless_service_name(name)),
        "spec": {"clusterIP": "None", "selector": selector_labels(name),
                 # Ranks must find each other before any of them is ready.
                 "publishNotReadyAddresses": True,
                 "ports": [{"name": "rendezvous", "port": rdv.DEFAULT_MASTER_PORT,
                            "targetPort": "rendezvous", "protocol": "TCP"}]},
    }


def build_group_statefulset(cr: dict[str, Any], spec: dict[str, Any], image: str,
                            group: int, plan: CachePlan | None = None) -> dict[str, Any]:
    name, namespace = cr["metadata"]["name"], cr["metadata"]["namespace"]
    sts_name = group_name(name, group)
    service = headless_service_name(name)
    leader_dns = f"{sts_name}-0.{service}.{namespace}.svc"
    labels = {**selector_labels(name), GROUP_LABEL: str(group)}
    env = rendezvous_env(spec, leader_dns, rdv.STATEFULSET_INDEX_LABEL)
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": child_metadata(cr, sts_name, {GROUP_LABEL: str(group)}),
        "spec": {
            "replicas": spec["parallelism"]["pipeline"],
            "serviceName": service,
            "podManagementPolicy": "Parallel",  # all ranks start together to rendezvous
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": pod_metadata(spec, labels),
                "spec": pod_spec(spec, name, image=image, plan=plan,
                                 processes=spec["parallelism"]["tensor"],
                                 pods_per_replica=spec["parallelism"]["pipeline"],
                                 extra_env=env,
                                 extra_ports=[RENDEZVOUS_PORT],
                                 probe_kind=Probes.RANK_ZERO_HTTP),
            },
        },
    }


def build_leader_worker_set(cr: dict[str, Any], spec: dict[str, Any],
                            image: str, plan: CachePlan | None = None) -> dict[str, Any]:
    name = cr["metadata"]["name"]
    tensor = spec["parallelism"]["tensor"]
    # LWS injects LWS_LEADER_ADDRESS into every pod of a group, ahead of our env.
    env = rendezvous_env(spec, "$(LWS_LEADER_ADDRESS)", rdv.LWS_WORKER_INDEX_LABEL)

    def template(role: str, probe_kind: str) -> dict[str, Any]:
        return {"metadata": pod_metadata(spec, {**selector_labels(name), ROLE_LABEL: role}),
                "spec": pod_spec(spec, name, image=image, processes=tensor, plan=plan,
                                 pods_per_replica=spec["parallelism"]["pipeline"],
                                 extra_env=env,
                                 extra_ports=[RENDEZVOUS_PORT], probe_kind=probe_kind)}

    return {
        "apiVersion": LWS_API_VERSION, "kind": "LeaderWorkerSet",
        "metadata": child_metadata(cr, name),
        "spec": {
            "replicas": spec["replicas"],
            "startupPolicy": "LeaderCreated",
            "rolloutStrategy": leader_worker_set_strategy(spec),
            "leaderWorkerTemplate": {
                "size": spec["parallelism"]["pipeline"],
                # A lost rank breaks the whole NCCL group: restart the group together.
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": template("leader", Probes.HTTP),
                "workerTemplate": template("worker", Probes.NONE),
            },
        },
    }
