"""One pod per replica: a Deployment whose pods hold all tensor x pipeline GPUs."""
from __future__ import annotations

from typing import Any

from kubellm.operator.builders.meta import ROLE_LABEL, child_metadata, selector_labels
from kubellm.operator.builders.pod import pod_spec


def build_deployment(cr: dict[str, Any], spec: dict[str, Any], image: str) -> dict[str, Any]:
    name = cr["metadata"]["name"]
    par = spec["parallelism"]
    pod_labels = {**selector_labels(name), ROLE_LABEL: "leader"}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": child_metadata(cr, name),
        "spec": {
            "replicas": spec["replicas"],
            "selector": {"matchLabels": selector_labels(name)},
            # GPUs are scarce: replace pods one at a time instead of asking for a surge pod.
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": pod_spec(spec, name, image=image,
                                 processes=par["tensor"] * par["pipeline"]),
            },
        },
    }
