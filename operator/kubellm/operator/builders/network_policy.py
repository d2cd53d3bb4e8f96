"""An optional NetworkPolicy per LLMDeployment: only the named peers reach its pods.

Ingress only (egress stays open: a pod downloads its weights from the Hugging Face hub).
Three rules, one per kind of caller:
- clients (``spec.networkPolicy.from``; empty: every pod of the namespace) on the API port;
- scrapers on the same port, which also serves /metrics: the operator's own autoscaler
  and the cluster's Prometheus (operator flags) plus ``spec.networkPolicy.metricsFrom``;
- for replicas spread over several pods, the pods of the same LLMDeployment on every
  port (the torch.distributed rendezvous and NCCL's own, randomly chosen ports).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kubellm.operator.builders.meta import child_metadata, selector_labels
from kubellm.operator.builders.pod import HTTP_PORT

SAME_NAMESPACE = {"podSelector": {}}


@dataclass(frozen=True)
class NetworkPolicyDefaults:
    """What the operator was started with (the chart's runtimeNetworkPolicy values)."""
    enabled: bool = False  # for LLMDeployments that leave spec.networkPolicy.enabled unset
    scrapers: list[dict[str, Any]] = field(default_factory=list)  # NetworkPolicyPeers


def wants_network_policy(spec: dict[str, Any], defaults: NetworkPolicyDefaults) -> bool:
    return (spec.get("networkPolicy") or {}).get("enabled", defaults.enabled)


def build_network_policy(cr: dict[str, Any], spec: dict[str, Any],
                         defaults: NetworkPolicyDefaults, *, multi_pod: bool,
                         extra_clients: list[dict[str, Any]] = (),
                         extra_scrapers: list[dict[str, Any]] = ()) -> dict[str, Any]:
    """``extra_clients``: the activator (it forwards held requests); ``extra_scrapers``:
    the Endpoint Picker (it reads /metrics)."""
    name = cr["metadata"]["name"]
    policy = spec.get("networkPolicy") or {}
    api_port = [{"protocol": "TCP", "port": HTTP_PORT}]
    clients = list(policy.get("from") or [SAME_NAMESPACE])
    if policy.get("from"):  # the namespace default admits them already
        clients += list(extra_clients)
    rules = [{"from": clients, "ports": api_port}]
    scrapers = (list(defaults.scrapers) + list(policy.get("metricsFrom") or [])
                + list(extra_scrapers))
    if scrapers:
        rules.append({"from": scrapers, "ports": api_port})
    if multi_pod:
        rules.append({"from": [{"podSelector": {"matchLabels": selector_labels(name)}}]})
    return {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": child_metadata(cr, name),
        "spec": {"podSelector": {"matchLabels": selector_labels(name)},
                 "policyTypes": ["Ingress"], "ingress": rules},
    }
