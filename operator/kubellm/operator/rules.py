"""Cross-field rules: CEL for the API server, a Python twin for the operator.

Each rule is written once here. The CRD generator puts ``cel`` into
``x-kubernetes-validations`` at ``path``; the operator runs ``check`` on the same
(defaulted) sub-object, because an API emulator, an old API server or a CRD applied
without validation would let a bad spec through.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


SOURCES = ("huggingFace", "pvc", "embedded")


@dataclass(frozen=True)
class Rule:
    path: tuple[str, ...]  # where the rule sits below spec; () is spec itself
    cel: str
    message: str
    check: Callable[[dict[str, Any]], bool]


def _replicas_within_bounds(spec: dict[str, Any]) -> bool:
    scaling = spec.get("autoscaling", {})
    if not scaling.get("enabled"):
        return True
    return scaling["minReplicas"] <= spec["replicas"] <= scaling["maxReplicas"]


# Labels the operator selects its pods by: a pod label may not replace them.
RESERVED_LABELS = ("app.kubernetes.io/name", "app.kubernetes.io/instance",
                   "app.kubernetes.io/managed-by")
RESERVED_LABEL_PREFIX = "kubellm.io/"


def _no_reserved_labels(labels: dict[str, Any]) -> bool:
    return not any(k in RESERVED_LABELS or k.startswith(RESERVED_LABEL_PREFIX)
                   for k in labels)


RULES: tuple[Rule, ...] = (
    Rule(("model", "source"), "(has(self.huggingFace) ? 1 : 0) + (has(self.pvc) ? 1 : 0) "
                              "+ (has(self.embedded) ? 1 : 0) == 1",
         "spec.model.source: set exactly one of huggingFace, pvc or embedded",
         lambda src: sum(key in src for key in SOURCES) == 1),
    # Guarded with has(): at registration the API server runs every rule on the schema's
    # own raw defaults (`autoscaling: {}`), before nested defaults are filled in.
    Rule(("autoscaling",), "!has(self.minReplicas) || !has(self.maxReplicas) || "
                           "self.minReplicas <= self.maxReplicas",
         "spec.autoscaling.minReplicas must be <= spec.autoscaling.maxReplicas",
         lambda a: a["minReplicas"] <= a["maxReplicas"]),
    Rule((), "!has(self.autoscaling) || !has(self.autoscaling.enabled) || "
             "!self.autoscaling.enabled || !has(self.replicas) || "
             "((!has(self.autoscaling.minReplicas) || "
             "self.replicas >= self.autoscaling.minReplicas) && "
             "(!has(self.autoscaling.maxReplicas) || "
             "self.replicas <= self.autoscaling.maxReplicas))",
         "spec.replicas must lie within [spec.autoscaling.minReplicas, "
         "spec.autoscaling.maxReplicas] while spec.autoscaling.enabled is true",
         _replicas_within_bounds),
    # Day-2 operations: the model cache and pod labels.
    Rule(("model",), "!has(self.cache) || (has(self.source) && has(self.source.huggingFace))",
         "spec.model.cache needs spec.model.source.huggingFace (a pvc source is already a "
         "volume; an embedded model is in the image)",
         lambda model: "cache" not in model or "huggingFace" in model.get("source", {})),
    Rule(("model", "cache"), "!has(self.claimName) || "
                             "(!has(self.size) && !has(self.storageClassName))",
         "spec.model.cache: size and storageClassName describe a claim the operator "
         "creates; leave them out with claimName",
         lambda c: "claimName" not in c or not ({"size", "storageClassName"} & set(c))),
    Rule(("podLabels",), "self.all(k, !(k in " + repr(list(RESERVED_LABELS)) + ") && "
                         f"!k.startsWith('{RESERVED_LABEL_PREFIX}'))",
         "spec.podLabels may not set the app.kubernetes.io/name, instance or managed-by "
         "labels, nor kubellm.io/ ones: the operator selects its pods by them",
         _no_reserved_labels),
)


def broken_rules(spec: dict[str, Any]) -> list[str]:
    """Messages of the rules a defaulted spec breaks (empty when it is valid)."""
    messages = []
    for rule in RULES:
        node: Any = spec
        for key in rule.path:
            node = node.get(key, {}) if isinstance(node, dict) else {}
        if not rule.check(node):
            messages.append(rule.message)
    return messages
