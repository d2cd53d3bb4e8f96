"""Inference-aware routing: an InferencePool of the serving pods and its Endpoint Picker.

Per LLMDeployment ``<name>`` with spec.routing.enabled (and the InferencePool CRD served):
- InferencePool ``<name>`` (inference.networking.k8s.io/v1): the pods that serve HTTP,
  their port, and the EPP Service as its endpointPickerRef;
- the EPP, from the Gateway API Inference Extension's image: ServiceAccount, Role and
  RoleBinding ``<name>-epp`` (it watches the pool, its pods, and the InferenceObjectives
  and InferenceModelRewrites of the namespace), ConfigMap ``<name>-epp`` (its plugins:
  queue, KV-cache and prefix-cache scorers by default), Deployment and Service
  ``<name>-epp`` (ext-proc gRPC on 9002 as http2, health 9003, metrics 9090).
The EPP scrapes each pod's /metrics for vllm:num_requests_waiting / _running and
vllm:kv_cache_usage_perc (the names kubellm exports) and reads the model from the body.
"""
from __future__ import annotations

import hashlib
from typing import Any

from kubellm.operator.builders.meta import (COMPONENT_LABEL, child_metadata, epp_labels)
from kubellm.operator.builders.pod import HTTP_PORT
from kubellm.operator.builders.security import CONTAINER_SECURITY
from kubellm.operator.builders.scheduling import cpu_pod_fields, pod_metadata

POOL_GROUP = "inference.networking.k8s.io"
POOL_API_VERSION = f"{POOL_GROUP}/v1"
OBJECTIVES_GROUP = "inference.networking.x-k8s.io"
COMPONENT = "endpoint-picker"
GRPC_PORT, HEALTH_PORT, METRICS_PORT = 9002, 9003, 9090
CONFIG_KEY = "default-plugins.yaml"
CONFIG_DIR = "/config"
# The upstream chart's default: queue depth and KV-cache use (load) weighted 2 each,
# prefix-cache affinity 3.
DEFAULT_PLUGINS = """\
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
    weight: 2
  - pluginRef: kv-cache-utilization-scorer
    weight: 2
  - pluginRef: prefix-cache-scorer
    weight: 3
"""
# Scale from zero behind the pool (keda mode): the EPP holds requests while the pool has
# no ready endpoint and exports the queue KEDA scales on.
FLOW_CONTROL = "featureGates:\n- flowControl\n"
EPP_RULES = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [POOL_GROUP], "resources": ["inferencepools"],
     "verbs": ["get", "list", "watch"]},
    {"apiGroups": [OBJECTIVES_GROUP],
     "resources": ["inferenceobjectives", "inferencemodelrewrites"],
     "verbs": ["get", "list", "watch"]},
]


def epp_name(name: str) -> str:
    return f"{name}-epp"


def epp_address(cr: dict[str, Any]) -> str:
    meta = cr["metadata"]
    return f"{epp_name(meta['name'])}.{meta['namespace']}.svc:{GRPC_PORT}"


def wants_routing(spec: dict[str, Any]) -> bool:
    return bool(spec["routing"]["enabled"])


def plugins_config(spec: dict[str, Any], flow_control: bool) -> str:
    given = spec["routing"]["endpointPicker"].get("pluginsConfig")
    if given:
        return given  # the user's, as written (flow control is theirs to turn on)
    return DEFAULT_PLUGINS + (FLOW_CONTROL if flow_control else "")


def _meta(cr: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    return child_metadata(cr, name or epp_name(cr["metadata"]["name"]),
                          {COMPONENT_LABEL: COMPONENT})


def build_inference_pool(cr: dict[str, Any], spec: dict[str, Any],
                         selector: dict[str, str]) -> dict[str, Any]:
    name = cr["metadata"]["name"]
    return {
        "apiVersion": POOL_API_VERSION, "kind": "InferencePool",
        "metadata": child_metadata(cr, name),
        "spec": {"selector": {"matchLabels": dict(selector)},
                 "targetPorts": [{"number": HTTP_PORT}],
                 "endpointPickerRef": {
                     "name": epp_name(name), "kind": "Service", "port": {"number": GRPC_PORT},
                     "failureMode": spec["routing"]["endpointPicker"]["failureMode"]}},
    }


def build_epp_config(cr: dict[str, Any], spec: dict[str, Any],
                     flow_control: bool) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(cr),
            "data": {CONFIG_KEY: plugins_config(spec, flow_control)}}


def build_epp_rbac(cr: dict[str, Any]) -> list[dict[str, Any]]:
    name = epp_name(cr["metadata"]["name"])
    rbac = "rbac.authorization.k8s.io"
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(cr)},
        {"apiVersion": f"{rbac}/v1", "kind": "Role", "metadata": _meta(cr),
         "rules": EPP_RULES},
        {"apiVersion": f"{rbac}/v1", "kind": "RoleBinding", "metadata": _meta(cr),
         "subjects": [{"kind": "ServiceAccount", "name": name,
                       "namespace": cr["metadata"]["namespace"]}],
         "roleRef": {"apiGroup": rbac, "kind": "Role", "name": name}},
    ]


def build_epp_deployment(cr: dict[str, Any], spec: dict[str, Any], image: str,
                         config_text: str) -> dict[str, Any]:
    name, namespace = cr["metadata"]["name"], cr["metadata"]["namespace"]
    picker = spec["routing"]["endpointPicker"]
    labels = epp_labels(name)
    health = {"grpc": {"port": HEALTH_PORT, "service": "inference-extension"}}
    container = {
        "name": "epp", "image": picker.get("image") or image,
        "args": ["--pool-name", name, "--pool-namespace", namespace,
                 "--pool-group", POOL_GROUP, "--config-file", f"{CONFIG_DIR}/{CONFIG_KEY}",
                 "--grpc-port", str(GRPC_PORT), "--grpc-health-port", str(HEALTH_PORT),
                 "--metrics-port", str(METRICS_PORT), "--zap-encoder", "json",
                 # Prometheus (and KEDA through it) scrape :9090 without a token.
                 "--metrics-endpoint-auth=false",
                 *picker.get("extraArgs", [])],
        "ports": [{"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
                  {"name": "grpc-health", "containerPort": HEALTH_PORT, "protocol": "TCP"},
                  {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}],
        "env": [{"name": "NAMESPACE", "valueFrom": {"fieldRef": {
                    "fieldPath": "metadata.namespace"}}},
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        "readinessProbe": {**health, "periodSeconds": 2},
        "livenessProbe": {**health, "initialDelaySeconds": 5, "periodSeconds": 10},
        "resources": picker.get("resources") or {"requests": {"cpu": "1", "memory": "1Gi"}},
        "volumeMounts": [{"name": "plugins-config", "mountPath": CONFIG_DIR}],
        # The image's own non-root user; it writes no file (its TLS certificate is made in
        # memory).
        "securityContext": {k: v for k, v in CONTAINER_SECURITY.items()},
    }
    digest = hashlib.sha256(config_text.encode()).hexdigest()[:16]
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(cr),
        "spec": {
            "replicas": 1,
            # One picker at a time: a second would need leader election.
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": labels},
            "template": {
                # The config is read once at start: a new config rolls the pod.
                "metadata": pod_metadata(spec, {**labels, COMPONENT_LABEL: COMPONENT},
                                         {"kubellm.io/plugins-config-sha256": digest}),
                "spec": {"serviceAccountName": epp_name(name),
                         **cpu_pod_fields(spec),
                         "containers": [container],
                         "volumes": [{"name": "plugins-config",
                                      "configMap": {"name": epp_name(name)}}],
                         "securityContext": {"runAsNonRoot": True,
                                             "seccompProfile": {"type": "RuntimeDefault"}},
                         "enableServiceLinks": False,
                         # As long as the longest drain of the pool's pods (upstream's advice).
                         "terminationGracePeriodSeconds": 130}},
        },
    }


def build_epp_service(cr: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Service", "metadata": _meta(cr),
        "spec": {"type": "ClusterIP", "selector": epp_labels(cr["metadata"]["name"]),
                 "ports": [{"name": "grpc-ext-proc", "port": GRPC_PORT, "targetPort": GRPC_PORT,
                            "protocol": "TCP", "appProtocol": "http2"},
                           {"name": "http-metrics", "port": METRICS_PORT,
                            "targetPort": METRICS_PORT, "protocol": "TCP"}]},
    }


def build_routing(cr: dict[str, Any], spec: dict[str, Any], selector: dict[str, str], *,
                  epp_image: str, flow_control: bool) -> list[dict[str, Any]]:
    config = build_epp_config(cr, spec, flow_control)
    return [build_inference_pool(cr, spec, selector), config, *build_epp_rbac(cr),
            build_epp_deployment(cr, spec, epp_image, config["data"][CONFIG_KEY]),
            build_epp_service(cr)]
