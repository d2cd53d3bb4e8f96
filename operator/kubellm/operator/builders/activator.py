"""Scale from zero in operator mode: the activator Deployment and what it needs.

- ``<name>-activator``: one small pod (the operator's image, ``kubellm-activator``) that
  holds requests while no replica is ready and forwards them to the first one;
- ``<name>-ready``: a headless Service of the ready serving pods, whose DNS tells the
  activator where they are (it has no API access).
While no replica is ready (and whenever spec.replicas is 0) the LLMDeployment's Service
and InferencePool select the activator instead of the replicas (children.py).
"""
from __future__ import annotations

from typing import Any

from kubellm.operator.builders.meta import (COMPONENT_LABEL, activator_labels,
                                            child_metadata)
from kubellm.operator.builders.pod import HTTP_PORT, HTTP_PORT_NAME, served_model_name
from kubellm.operator.builders.scheduling import cpu_pod_fields, pod_metadata
from kubellm.operator.builders.security import CONTAINER_SECURITY
from kubellm.operator.builders.startup import startup_seconds

COMPONENT = "activator"
HOLD_MARGIN_SECONDS = 300  # on top of the replica's startup budget: scheduling, image pull
POD_SECURITY = {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000,
                "seccompProfile": {"type": "RuntimeDefault"}}


def wants_activator(spec: dict[str, Any]) -> bool:
    scaling = spec["autoscaling"]
    return bool(scaling["enabled"]) and scaling["mode"] == "operator" \
        and scaling["minReplicas"] == 0


def activator_name(name: str) -> str:
    return f"{name}-activator"


def ready_service_name(name: str) -> str:
    return f"{name}-ready"


def hold_timeout_seconds(spec: dict[str, Any]) -> int:
    return startup_seconds(spec, spec["parallelism"]["pipeline"]) + HOLD_MARGIN_SECONDS


def build_ready_service(cr: dict[str, Any], selector: dict[str, str]) -> dict[str, Any]:
    name = cr["metadata"]["name"]
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": child_metadata(cr, ready_service_name(name), {COMPONENT_LABEL: COMPONENT}),
        # Headless, ready pods only: its DNS answer is the list of replicas that serve.
        "spec": {"clusterIP": "None", "selector": dict(selector),
                 "publishNotReadyAddresses": False,
                 # Not named "http": the chart's ServiceMonitor scrapes that port of the
                 # LLMDeployment's Services, and these pods are scraped there already.
                 "ports": [{"name": "ready", "port": HTTP_PORT,
                            "targetPort": HTTP_PORT_NAME, "protocol": "TCP"}]},
    }


def build_activator(cr: dict[str, Any], spec: dict[str, Any], image: str) -> dict[str, Any]:
    name, namespace = cr["metadata"]["name"], cr["metadata"]["namespace"]
    labels = activator_labels(name)
    probe = {"httpGet": {"path": "/ready", "port": HTTP_PORT_NAME}, "periodSeconds": 2}
    container = {
        "name": "activator", "image": image, "command": ["kubellm-activator"],
        "args": ["--upstream", f"{ready_service_name(name)}.{namespace}.svc",
                 "--upstream-port", str(HTTP_PORT), "--port", str(HTTP_PORT),
                 "--served-model-name", served_model_name(spec, name),
                 "--hold-timeout-seconds", str(hold_timeout_seconds(spec))],
        "ports": [{"name": HTTP_PORT_NAME, "containerPort": HTTP_PORT, "protocol": "TCP"}],
        "readinessProbe": probe,
        "livenessProbe": {**probe, "httpGet": {"path": "/health", "port": HTTP_PORT_NAME},
                          "periodSeconds": 10},
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                      "limits": {"memory": "512Mi"}},
        "securityContext": CONTAINER_SECURITY,
    }
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": child_metadata(cr, activator_name(name), {COMPONENT_LABEL: COMPONENT}),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": pod_metadata(spec, {**labels, COMPONENT_LABEL: COMPONENT}),
                "spec": {"containers": [container], "securityContext": POD_SECURITY,
                         **cpu_pod_fields(spec),
                         "automountServiceAccountToken": False,
                         "enableServiceLinks": False,
                         # Held requests are answered (or time out) before it exits.
                         "terminationGracePeriodSeconds": hold_timeout_seconds(spec)}},
        },
    }
