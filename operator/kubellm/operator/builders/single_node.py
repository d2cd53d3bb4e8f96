"""One pod per replica: a Deployment whose pods hold all tensor x pipeline GPUs."""
from __future__ import annotations

from typing import Any

from kubellm.operator.builders.meta import ROLE_LABEL, child_metadata, selector_labels
from kubellm.operator.builders.model_cache import CachePlan
from kubellm.operator.builders.pod import pod_spec
from kubellm.operator.builders.rollout import deployment_strategy
from kubellm.operator.builders.scheduling import pod_metadata


def build_deployment(cr: dict[str, Any], spec: dict[str, Any], image: str,
                     plan: CachePlan | None = None) -> dict[str, Any]:
    name = cr["metadata"]["name"]
    par = spec["parallelism"]
    pod_labels = {**selector_labels(name), ROLE_LABEL: "leader"}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": child_metadata(cr, name),
        "spec": {
            "replicas": spec["replicas"],
            "selector": {"matchLabels": selector_labels(name)},
            "strategy": deployment_strategy(spec),
            "template": {
                "metadata": pod_metadata(spec, pod_labels),
                "spec": pod_spec(spec, name, image=image, plan=plan,
                                 processes=par["tensor"] * par["pipeline"]),
            },
        },
    }
