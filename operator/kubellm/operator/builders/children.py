"""Everything one LLMDeployment owns, chosen by where its GPUs fit."""
from __future__ import annotations

import copy
import enum
from typing import Any

from kubellm.operator import rendezvous as rdv
from kubellm.operator.builders.activator import (build_activator, build_ready_service,
                                                wants_activator)
from kubellm.operator.builders.images import DEFAULT_ACTIVATOR_IMAGE, DEFAULT_EPP_IMAGE
from kubellm.operator.builders.meta import (ROLE_LABEL, activator_labels,
                                            activator_selector, epp_labels, selector_labels)
from kubellm.operator.builders.model_cache import CachePlan, cache_plan
from kubellm.operator.builders.network_policy import (NetworkPolicyDefaults,
                                                     build_network_policy,
                                                     wants_network_policy)
from kubellm.operator.builders.multi_node import (build_group_statefulset,
                                                  build_headless_service,
                                                  build_leader_worker_set)
from kubellm.operator.builders.rollout import build_disruption_budget, wants_disruption_budget
from kubellm.operator.builders.routing import build_routing, wants_routing
from kubellm.operator.builders.service import build_service
from kubellm.operator.builders.single_node import build_deployment
from kubellm.operator.validation import SpecError


class Topology(enum.Enum):
    SINGLE_NODE = "Deployment"  # one pod per replica
    LEADER_WORKER_SET = "LeaderWorkerSet"  # multi-node, LWS controller installed
    STATEFUL_SETS = "StatefulSets"  # multi-node fallback: one StatefulSet per replica


def topology(spec: dict[str, Any], lws_available: bool) -> Topology:
    par = spec["parallelism"]
    if par["tensor"] > par["gpusPerNode"]:
        raise SpecError(f"spec.parallelism.tensor ({par['tensor']}) exceeds "
                        f"spec.parallelism.gpusPerNode ({par['gpusPerNode']}): a tensor-"
                        "parallel group must fit on one node")
    if par["tensor"] * par["pipeline"] <= par["gpusPerNode"]:
        return Topology.SINGLE_NODE
    return Topology.LEADER_WORKER_SET if lws_available else Topology.STATEFUL_SETS


def serving_selector(name: str, topo: Topology) -> dict[str, str]:
    """Labels of the pods that serve HTTP: the Service's and the scale selector."""
    if topo is Topology.STATEFUL_SETS:
        return {**selector_labels(name), rdv.STATEFULSET_INDEX_LABEL: "0"}
    return {**selector_labels(name), ROLE_LABEL: "leader"}


def checked_cache_plan(cr: dict[str, Any], spec: dict[str, Any],
                       topo: Topology) -> CachePlan | None:
    """The model cache plan; SpecError for a layout its access mode cannot serve."""
    plan = cache_plan(cr, spec)
    if plan and plan.access_mode == "ReadWriteOnce" and topo is not Topology.SINGLE_NODE:
        raise SpecError("spec.model.cache.accessMode: ReadWriteOnce attaches the claim to one "
                        f"node, but a replica spans {spec['parallelism']['pipeline']} pods on "
                        "several nodes; use ReadWriteMany")
    return plan


def flow_control(spec: dict[str, Any]) -> bool:
    """Scale from zero behind the InferencePool in keda mode: the EPP holds requests."""
    scaling = spec["autoscaling"]
    return wants_routing(spec) and bool(scaling["enabled"]) and scaling["mode"] == "keda" \
        and scaling["minReplicas"] == 0


def build_children(cr: dict[str, Any], spec: dict[str, Any], *, image: str,
                   lws_available: bool,
                   network_policy: NetworkPolicyDefaults = NetworkPolicyDefaults(),
                   pool_available: bool = False, route_to_activator: bool = False,
                   epp_image: str = DEFAULT_EPP_IMAGE,
                   activator_image: str = DEFAULT_ACTIVATOR_IMAGE) -> list[dict[str, Any]]:
    """All children of ``cr`` (a defaulted ``spec``) but the model cache's claim and
    loader Job (model_cache.py, whose Jobs depend on what exists); raises SpecError if
    none fit. ``route_to_activator``: no replica is ready, so the Service and the
    InferencePool send requests to the activator (scale from zero)."""
    topo = topology(spec, lws_available)
    plan = checked_cache_plan(cr, spec, topo)
    image = spec.get("image") or image
    name = cr["metadata"]["name"]
    serving = serving_selector(name, topo)
    activator = wants_activator(spec)
    endpoints = activator_selector(name, serving) if activator and route_to_activator \
        else serving
    children = [build_service(cr, spec, endpoints)]
    if topo is Topology.SINGLE_NODE:
        children.append(build_deployment(cr, spec, image, plan))
    elif topo is Topology.LEADER_WORKER_SET:
        children.append(build_leader_worker_set(cr, spec, image, plan))
    else:
        children.append(build_headless_service(cr))
        children += [build_group_statefulset(cr, spec, image, group, plan)
                     for group in range(spec["replicas"])]
    if activator:
        children += [build_ready_service(cr, serving),
                     build_activator(cr, spec, activator_image)]
    if wants_routing(spec) and pool_available:
        children += build_routing(cr, spec, endpoints, epp_image=epp_image,
                                  flow_control=flow_control(spec))
    if wants_network_policy(spec, network_policy):
        peers = ([{"podSelector": {"matchLabels": activator_labels(name)}}] if activator
                 else [])  # (it forwards held requests)
        scrapers = ([{"podSelector": {"matchLabels": epp_labels(name)}}]
                    if wants_routing(spec) else [])
        children.append(build_network_policy(cr, spec, network_policy,
                                             multi_pod=topo is not Topology.SINGLE_NODE,
                                             extra_clients=peers, extra_scrapers=scrapers))
    if wants_disruption_budget(spec):
        children.append(build_disruption_budget(cr))
    return copy.deepcopy(children)  # no dict shared between children or with constants
