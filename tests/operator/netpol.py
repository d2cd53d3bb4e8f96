"""Evaluate Kubernetes NetworkPolicies (networking.k8s.io/v1 ingress semantics) in tests.

What a conforming network plugin enforces: a pod that no policy selects for Ingress
accepts everything; a selected pod accepts a connection when some rule of some selecting
policy admits the source and the port. Within a rule, peers are alternatives, and a peer
with both a namespaceSelector and a podSelector needs both; a peer with only a
podSelector means pods of the policy's own namespace. Rules without ``from`` or without
``ports`` match every source or port. ipBlock peers never match here (no pod IPs).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Pod:
    namespace: str
    labels: dict[str, str] = field(default_factory=dict)
    namespace_labels: dict[str, str] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)  # named container ports

    def ns_labels(self) -> dict[str, str]:
        # Every namespace carries this label (Kubernetes >= 1.22).
        return {"kubernetes.io/metadata.name": self.namespace, **self.namespace_labels}


def selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """LabelSelector semantics: an empty selector selects everything."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _peer_admits(peer: dict[str, Any], policy_ns: str, source: Pod) -> bool:
    if "ipBlock" in peer:
        return False
    if "namespaceSelector" in peer:
        if not selects(peer["namespaceSelector"], source.ns_labels()):
            return False
    elif source.namespace != policy_ns:
        return False
    return selects(peer.get("podSelector"), source.labels)


def _port_matches(rule_ports: list[dict[str, Any]] | None, port: int, target: Pod) -> bool:
    if not rule_ports:
        return True
    for entry in rule_ports:
        value = entry.get("port")
        if entry.get("protocol", "TCP") != "TCP":
            continue
        if value is None or value == port or target.ports.get(str(value)) == port:
            return True
    return False


def allows(policies: list[dict[str, Any]], source: Pod, target: Pod, port: int) -> bool:
    """Whether ``source`` may open a TCP connection to ``target``:``port``."""
    selecting = [p for p in policies
                 if p["metadata"].get("namespace", target.namespace) == target.namespace
                 and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])
                 and selects(p["spec"].get("podSelector"), target.labels)]
    if not selecting:
        return True
    for policy in selecting:
        ns = policy["metadata"].get("namespace", target.namespace)
        for rule in policy["spec"].get("ingress") or []:
            peers = rule.get("from")
            source_ok = not peers or any(_peer_admits(p, ns, source) for p in peers)
            if source_ok and _port_matches(rule.get("ports"), port, target):
                return True
    return False
