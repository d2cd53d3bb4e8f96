"""``keda`` mode: a KEDA ScaledObject that scales the LLMDeployment's scale subresource.

KEDA's Prometheus scaler uses HPA AverageValue semantics, desired = ceil(sum / threshold),
which is our queue formula with threshold = targetQueueDepth. The behaviour block mirrors
our stabilization windows and step limit. When spec.engine.maxNumSeqs is set, a second
trigger on running requests (threshold maxNumSeqs) stands in for our running signal:
the HPA takes the larger of the two, so a busy fleet is not scaled below what it runs.

minReplicas 0: the pods' series vanish at zero replicas, so something that outlives
them wakes the model: with spec.routing, the Endpoint Picker's flow-control queue (it
holds the requests); without, the KEDA HTTP add-on's interceptor (http_addon.py).
KEDA's cooldownPeriod, which governs the last replica, is scaleToZeroAfterSeconds.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from kubellm.operator.resources import API_VERSION
from kubellm.operator.autoscaling.config import AutoscalingSpec, InvalidAutoscalingSpec
from kubellm.operator.autoscaling.http_addon import push_trigger, uses_http_addon

# The HPA KEDA creates rejects longer stabilization windows (autoscaling/v2 validation).
HPA_MAX_STABILIZATION_SECONDS = 3600
# Where KEDA reaches Prometheus; the Helm chart sets it on the operator's Deployment.
PROMETHEUS_ADDRESS_ENV = "KUBELLM_PROMETHEUS_ADDRESS"
DEFAULT_PROMETHEUS_ADDRESS = "http://prometheus-operated.monitoring.svc:9090"


def build_scaled_object(name: str, namespace: str, spec: Mapping[str, Any], uid: str, *,
                        server_address: str | None = None) -> dict[str, Any]:
    """The ScaledObject for an LLMDeployment ``spec`` (the whole spec)."""
    scaling = AutoscalingSpec.from_spec(spec)
    for field, seconds in (("scaleUpStabilizationSeconds", scaling.scale_up_stabilization_seconds),
                           ("scaleDownStabilizationSeconds",
                            scaling.scale_down_stabilization_seconds)):
        if seconds > HPA_MAX_STABILIZATION_SECONDS:
            raise InvalidAutoscalingSpec(
                f"spec.autoscaling.{field} must be <= {HPA_MAX_STABILIZATION_SECONDS} in keda "
                f"mode (the HorizontalPodAutoscaler's limit), got {seconds:g}")
    address = server_address or os.environ.get(PROMETHEUS_ADDRESS_ENV) or DEFAULT_PROMETHEUS_ADDRESS
    window = f"{int(scaling.metrics_window_seconds)}s"
    # The pods' series as a ServiceMonitor on the LLMDeployment's Service labels them.
    series = f'{{namespace="{namespace}",service="{name}"}}'
    period = max(1, int(scaling.scrape_interval_seconds))
    triggers = [_trigger("queue-depth", address,
                         f"sum(avg_over_time(vllm:num_requests_waiting{series}[{window}]))",
                         scaling.target_queue_depth)]
    max_num_seqs = ((spec.get("engine") or {}).get("maxNumSeqs"))
    if max_num_seqs:
        triggers.append(_trigger("running", address,
                                 f"sum(avg_over_time(vllm:num_requests_running{series}[{window}]))",
                                 max_num_seqs))
    cooldown = scaling.scale_down_stabilization_seconds
    if scaling.scales_to_zero:
        cooldown = scaling.scale_to_zero_after_seconds
        if (spec.get("routing") or {}).get("enabled"):
            epp = f'{{namespace="{namespace}",service="{name}-epp"}}'
            triggers.append(_trigger(
                "epp-queue", address,
                f"sum(inference_extension_flow_control_queue_size{epp})",
                scaling.target_queue_depth, activation=0))
        for trigger in triggers:  # no pods (or no queue yet), no series: zero, not an error
            trigger["metadata"]["ignoreNullValues"] = "true"
        if uses_http_addon(spec):
            triggers.append(push_trigger(name))
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "kubellm",
                       "app.kubernetes.io/component": "autoscaler",
                       "kubellm.io/llmdeployment": name},
            "ownerReferences": [{"apiVersion": API_VERSION, "kind": "LLMDeployment",
                                 "name": name, "uid": uid, "controller": True,
                                 "blockOwnerDeletion": True}],
        },
        "spec": {
            "scaleTargetRef": {"apiVersion": API_VERSION, "kind": "LLMDeployment",
                               "name": name},
            "pollingInterval": period,
            "cooldownPeriod": int(cooldown),
            "minReplicaCount": scaling.min_replicas,
            "maxReplicaCount": scaling.max_replicas,
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": {
                "scaleUp": {
                    "stabilizationWindowSeconds": int(scaling.scale_up_stabilization_seconds),
                    "selectPolicy": "Max",
                    "policies": [{"type": "Pods", "value": scaling.max_scale_up_step,
                                  "periodSeconds": period}]},
                "scaleDown": {
                    "stabilizationWindowSeconds": int(scaling.scale_down_stabilization_seconds),
                    "selectPolicy": "Max",
                    "policies": [{"type": "Percent", "value": 100, "periodSeconds": period}]},
            }}},
            "triggers": triggers,
        },
    }


def _trigger(name: str, address: str, query: str, threshold: float,
             activation: float | None = None) -> dict[str, Any]:
    meta = {"serverAddress": address, "query": query, "threshold": f"{threshold:g}",
            # An empty result is an error (HPA holds), not zero: a fleet we cannot see
            # is not an idle fleet.
            "ignoreNullValues": "false"}
    if activation is not None:  # 0 -> 1 as soon as the value exceeds it
        meta["activationThreshold"] = f"{activation:g}"
    return {"type": "prometheus", "name": name, "metricType": "AverageValue",
            "metadata": meta}
