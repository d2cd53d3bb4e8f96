"""keda mode with minReplicas 0 and no routing: the KEDA HTTP add-on holds the requests.

The add-on's interceptor proxy queues requests for a host while its target has no ready
replica and reports the queue to KEDA through its external scaler. kubellm keeps one
owner per ScaledObject: the HTTPScaledObject carries the add-on's annotation that skips
its own ScaledObject, and the LLMDeployment's ScaledObject (keda.py) gets the
`external-push` trigger that names it. Clients that should wake the model call the
interceptor (`keda-add-ons-http-interceptor-proxy.keda:8080`) with the LLMDeployment's
Service host name as Host.

The add-on's released defaults (a 20 s wait for a replica, 500 ms for response headers)
are far below an LLM's cold start and a non-streamed generation; both are raised here.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from kubellm.operator.autoscaling.config import AutoscalingSpec
from kubellm.operator.resources import API_VERSION

HTTP_API_VERSION = "http.keda.sh/v1alpha1"
SKIP_SCALED_OBJECT = "httpscaledobject.keda.sh/skip-scaledobject-creation"
# The add-on's external scaler, as its chart installs it into the `keda` namespace.
SCALER_ADDRESS_ENV = "KUBELLM_KEDA_HTTP_SCALER"
DEFAULT_SCALER_ADDRESS = "keda-add-ons-http-external-scaler.keda:9090"
COLD_START_WAIT_SECONDS = 1800  # a replica loading a large model from the hub
RESPONSE_HEADER_SECONDS = 3600  # a non-streamed response sends its headers at the end
DEFAULT_CONCURRENCY = 256  # requests one replica takes at once when maxNumSeqs is unset


def uses_http_addon(spec: Mapping[str, Any]) -> bool:
    scaling = AutoscalingSpec.from_spec(spec)
    routed = bool((spec.get("routing") or {}).get("enabled"))
    return scaling.enabled and scaling.mode == "keda" and scaling.scales_to_zero \
        and not routed


def scaler_address() -> str:
    return os.environ.get(SCALER_ADDRESS_ENV) or DEFAULT_SCALER_ADDRESS


def hosts(name: str, namespace: str) -> list[str]:
    return [name, f"{name}.{namespace}", f"{name}.{namespace}.svc",
            f"{name}.{namespace}.svc.cluster.local"]


def push_trigger(name: str) -> dict[str, Any]:
    return {"type": "external-push", "name": "http-add-on",
            "metadata": {"scalerAddress": scaler_address(), "httpScaledObject": name}}


def build_http_scaled_object(name: str, namespace: str, spec: Mapping[str, Any],
                             uid: str) -> dict[str, Any]:
    scaling = AutoscalingSpec.from_spec(spec)
    engine = spec.get("engine") or {}
    # Concurrency per replica: what it runs at once plus the queue we aim for.
    concurrency = int((engine.get("maxNumSeqs") or DEFAULT_CONCURRENCY)
                      + scaling.target_queue_depth)
    return {
        "apiVersion": HTTP_API_VERSION, "kind": "HTTPScaledObject",
        "metadata": {
            "name": name, "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "kubellm",
                       "app.kubernetes.io/component": "autoscaler",
                       "kubellm.io/llmdeployment": name},
            "annotations": {SKIP_SCALED_OBJECT: "true"},
            "ownerReferences": [{"apiVersion": API_VERSION, "kind": "LLMDeployment",
                                 "name": name, "uid": uid, "controller": True,
                                 "blockOwnerDeletion": True}]},
        "spec": {
            "hosts": hosts(name, namespace),
            "pathPrefixes": ["/"],
            "scaleTargetRef": {"apiVersion": API_VERSION, "kind": "LLMDeployment",
                               "name": name, "service": name,
                               "port": int((spec.get("service") or {}).get("port", 8000))},
            "replicas": {"min": 0, "max": scaling.max_replicas},
            "scaledownPeriod": int(scaling.scale_to_zero_after_seconds),
            "scalingMetric": {"concurrency": {"targetValue": concurrency}},
            "timeouts": {"conditionWait": f"{COLD_START_WAIT_SECONDS}s",
                         "responseHeader": f"{RESPONSE_HEADER_SECONDS}s"},
        },
    }
