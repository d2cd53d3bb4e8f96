"""The LLMDeployment OpenAPI v3 schema: the single source of its fields and defaults.

The CRD in crds/ is generated from this module (``python -m kubellm.operator.crd``), and
the operator fills defaults and validates from the same dicts, so the API server and the
operator can never disagree about a field.
"""
from __future__ import annotations

from typing import Any

from kubellm.operator.autoscaling.keda import HPA_MAX_STABILIZATION_SECONDS

Schema = dict[str, Any]
# The HorizontalPodAutoscaler that KEDA creates refuses longer windows; the operator mode
# has no such limit (the autoscaler checks keda mode when it builds the ScaledObject).
KEDA_STABILIZATION_LIMIT = (f"At most {HPA_MAX_STABILIZATION_SECONDS} seconds in keda mode "
                            "(the HorizontalPodAutoscaler's limit).")


def _f(type_: str, description: str, **extra: Any) -> Schema:
    return {"type": type_, "description": description, **extra}


def _obj(description: str, properties: dict[str, Schema], **extra: Any) -> Schema:
    return {"type": "object", "description": description, "properties": properties, **extra}


def _quantity(description: str, **extra: Any) -> Schema:
    # The API server's own spelling for resource quantities ("16Gi", "500m", 4).
    return {"description": description, "x-kubernetes-int-or-string": True,
            "anyOf": [{"type": "integer"}, {"type": "string"}], **extra}


def _free(description: str, type_: str = "object") -> Schema:
    # Kubernetes core types (affinity, tolerations, env) are passed through unchanged.
    items = {"items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    extra = items if type_ == "array" else {"x-kubernetes-preserve-unknown-fields": True}
    return {"type": type_, "description": description, **extra}


SECRET_KEY_REF = _obj(
    "A key of a Secret in the LLMDeployment's namespace.",
    {"name": _f("string", "Name of the Secret.", minLength=1),
     "key": _f("string", "Key inside the Secret.", minLength=1)},
    required=["name", "key"])

MODEL = _obj(
    "The model to serve and where its weights come from.",
    {
        "name": _f("string", "Model name served to clients (the OpenAI `model` field); "
                             "defaults to the LLMDeployment's name.", minLength=1),
        "source": _obj(
            "Where the weights are read from: exactly one of huggingFace, pvc or "
            "embedded.",
            {"huggingFace": _f("string", "Hugging Face repository id, e.g. "
                                         "Qwen/Qwen2.5-0.5B-Instruct.", minLength=1),
             "pvc": _obj("A PersistentVolumeClaim that holds the checkpoint "
                         "(config.json, safetensors, tokenizer).",
                         {"claimName": _f("string", "Name of the claim.", minLength=1),
                          "path": _f("string", "Checkpoint folder inside the claim.",
                                     default="")},
                         required=["claimName"]),
             "embedded": _f("string", "A model shipped inside the runtime image "
                                      "(no download, no volume): try kubellm on any "
                                      "cluster, CPU-only ones included.",
                            enum=["SmolLM2-135M-Instruct"]),
             "tokenSecretRef": SECRET_KEY_REF | {
                 "description": "Secret key holding a Hugging Face token (gated models); "
                                "exposed to the runtime as HF_TOKEN."}}),
        "revision": _f("string", "Hugging Face revision (branch, tag or commit)."),
        "parameters": _f("string", "Parameter count, e.g. 8B or 135M (all experts of a "
                                   "mixture-of-experts model); sizes the pods' default "
                                   "CPU and memory requests. Default: read from the "
                                   "model's name.", pattern=r"^[0-9]+(\.[0-9]+)?[KMBT]$",
                         maxLength=16),
        "activeParameters": _f("string", "Parameters one token goes through, e.g. 3B for "
                                         "Qwen3-30B-A3B (a mixture-of-experts model's "
                                         "routed experts only; at most `parameters`); "
                                         "sizes the CPUs of CPU pods. Default: the "
                                         "name's A3B part, else the parameter count.",
                               pattern=r"^[0-9]+(\.[0-9]+)?[KMBT]$", maxLength=16),
        "dtype": _f("string", "Weight and activation dtype.", default="auto",
                    enum=["auto", "float16", "bfloat16", "float32"]),
        "quantization": _f("string", "Weight quantization (`kubellm serve --quantization`). "
                                     "Unset: what the checkpoint is (its "
                                     "quantization_config, or a GGUF file). 4bit: quantize "
                                     "a float checkpoint's linear layers to group-wise int4 "
                                     "at load. fp8: quantize them to FP8 (E4M3) with a "
                                     "scale per output channel at load. gptq, awq, "
                                     "compressed-tensors, gguf: insist on that "
                                     "pre-quantized format. Quantized weights also size "
                                     "the pods' memory requests.",
                           enum=["4bit", "fp8", "gptq", "awq", "compressed-tensors", "gguf"]),
        "maxModelLen": _f("integer", "Longest sequence (prompt + output) in tokens; "
                                     "defaults to the model's context length.", minimum=1),
    },
    required=["source"])

PARALLELISM = _obj(
    "How one replica is split over GPUs. tensor x pipeline GPUs per replica; when they "
    "fit gpusPerNode the replica is one pod, otherwise a group of `pipeline` pods with "
    "`tensor` GPUs each.",
    {"tensor": _f("integer", "Tensor-parallel size: GPUs that split every layer. "
                             "Must fit on one node.", minimum=1, default=1),
     "pipeline": _f("integer", "Pipeline-parallel size: stages the layers are split "
                               "into.", minimum=1, default=1),
     "gpusPerNode": _f("integer", "GPUs available on one node; decides single-pod vs "
                                  "multi-node replicas.", minimum=1, default=8)},
    default={})

AUTOSCALING = _obj(
    "Queue-depth autoscaling of spec.replicas.",
    {"enabled": _f("boolean", "Let the autoscaler drive spec.replicas.", default=False),
     "mode": _f("string", "operator: the operator scrapes /metrics itself; keda: a KEDA "
                          "ScaledObject is emitted instead.", default="operator",
                enum=["operator", "keda"]),
     "minReplicas": _f("integer", "Lower bound of replicas.", minimum=1, default=1),
     "maxReplicas": _f("integer", "Upper bound of replicas.", minimum=1, default=1),
     "targetQueueDepth": _f("number", "Waiting requests per replica the autoscaler aims "
                                      "for.", exclusiveMinimum=True, minimum=0, default=8),
     "metricsWindowSeconds": _f("integer", "Window the queue depth is averaged over.",
                                minimum=1, default=60),
     "scrapeIntervalSeconds": _f("integer", "Seconds between two scrapes of /metrics.",
                                 minimum=1, default=15),
     "scaleUpStabilizationSeconds": _f("integer", "Sustained overload needed before "
                                                  f"scaling up. {KEDA_STABILIZATION_LIMIT}",
                                       minimum=0, default=0),
     "scaleDownStabilizationSeconds": _f("integer", "Sustained underload needed before "
                                                    "scaling down. "
                                                    f"{KEDA_STABILIZATION_LIMIT}",
                                         minimum=0, default=300),
     "maxScaleUpStep": _f("integer", "Most replicas added in one decision.", minimum=1,
                          default=4)},
    default={})

ENGINE = _obj(
    "Runtime knobs, passed to `kubellm serve` as flags; unset ones keep the runtime's "
    "defaults.",
    {"gpuMemoryUtilization": _f("number", "Fraction of GPU memory for weights and KV "
                                          "cache.", minimum=0, exclusiveMinimum=True,
                                maximum=1),
     "maxNumSeqs": _f("integer", "Most sequences in one batch.", minimum=1),
     "maxNumBatchedTokens": _f("integer", "Token budget of one engine step.", minimum=1),
     "blockSize": _f("integer", "Tokens per KV-cache block.", enum=[8, 16, 32, 64, 128]),
     "kvCacheDtype": _f("string", "KV-cache storage: auto (the model dtype) or fp8 / "
                                  "fp8_e4m3 (E4M3, one byte per element: twice the "
                                  "tokens).", enum=["auto", "fp8", "fp8_e4m3"]),
     "enablePrefixCaching": _f("boolean", "Reuse KV blocks of shared prompt prefixes."),
     "schedulingPolicy": _f("string", "Order in which waiting requests are admitted.",
                            enum=["fcfs", "priority", "timeslice"]),
     "enforceEager": _f("boolean", "Disable CUDA graphs (slower, less memory)."),
     "seed": _f("integer", "Random seed of the engine."),
     "maxQueue": _f("integer", "Most waiting requests before the server answers 503.",
                    minimum=1),
     "shutdownTimeoutSeconds": _f("integer", "Seconds in-flight requests get to finish "
                                             "after SIGTERM.", minimum=0, default=30),
     "extraArgs": {"type": "array", "description": "Further `kubellm serve` flags, "
                                                   "appended as they are.",
                   "items": {"type": "string"}}},
    default={})

RESOURCES = _obj(
    "Per-pod compute resources besides the GPUs, which parallelism decides.",
    {"accelerator": _f("string", "gpu: each rank gets one GPU (gpuResourceName); none: "
                                 "the runtime runs on CPU and the pods request no GPU "
                                 "(laptop clusters: kind, minikube, k3d).",
                       enum=["gpu", "none"], default="gpu"),
     "gpuResourceName": _f("string", "Extended resource that counts GPUs.",
                           default="nvidia.com/gpu"),
     "cpu": _quantity("CPU request and limit of one pod, e.g. 8. Unset: a request sized "
                      "from the ranks in the pod."),
     "memory": _quantity("Memory of the runtime in one pod, e.g. 64Gi: the pod's "
                         "request and limit are this plus sharedMemory. Unset: a request "
                         "sized from the model and the layout (plus sharedMemory)."),
     "sharedMemory": _quantity("Size of the /dev/shm memory volume (NCCL, data "
                               "loading); it counts against the pod's memory, so the "
                               "memory request and limit are raised by it. Unset: 1Gi + "
                               "1Gi per rank in the pod.")},
    default={})

SERVICE = _obj(
    "The in-cluster endpoint.",
    {"type": _f("string", "Service type.", default="ClusterIP",
                enum=["ClusterIP", "NodePort", "LoadBalancer"]),
     "port": _f("integer", "Service port that forwards to the pods' HTTP port.",
                minimum=1, maximum=65535, default=8000)},
    default={})

NETWORK_POLICY = _obj(
    "A NetworkPolicy that admits traffic to the pods only from the named peers.",
    {"enabled": _f("boolean", "Create the NetworkPolicy. Unset: the operator's default "
                              "(the chart's runtimeNetworkPolicy.enabled)."),
     "from": {"type": "array", "maxItems": 32,
              "description": "Peers (core/v1 NetworkPolicyPeer) that may call the API "
                             "port. Empty: every pod of the LLMDeployment's namespace.",
              "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
     "metricsFrom": {"type": "array", "maxItems": 32,
                     "description": "Further peers that may scrape /metrics (the "
                                    "operator's own scrapers are always admitted).",
                     "items": {"type": "object",
                               "x-kubernetes-preserve-unknown-fields": True}}})

SPEC = _obj(
    "Desired state of an LLMDeployment.",
    {"model": MODEL,
     "parallelism": PARALLELISM,
     "replicas": _f("integer", "Model replicas (each tensor x pipeline GPUs); written by "
                               "the autoscaler when autoscaling is enabled.", minimum=0,
                    default=1),
     "autoscaling": AUTOSCALING,
     "engine": ENGINE,
     "resources": RESOURCES,
     "image": _f("string", "Container image with kubellm; defaults to the operator's "
                           "--default-image.", minLength=1),
     "imagePullPolicy": _f("string", "Pull policy of the image.",
                           enum=["Always", "IfNotPresent", "Never"]),
     "nodeSelector": {"type": "object", "description": "Node labels the pods that serve "
                                                       "the model (and the loader) must match.",
                      "additionalProperties": {"type": "string"}},
     "tolerations": _free("Pod tolerations (core/v1 Toleration). GPU pods also "
                          "tolerate the NoSchedule taint keyed by gpuResourceName "
                          "(nvidia.com/gpu) unless one of these names that key.", "array"),
     "affinity": _free("Pod affinity (core/v1 Affinity) of the pods that serve the model "
                       "and the loader."),
     "service": SERVICE,
     "networkPolicy": NETWORK_POLICY,
     "apiKeySecretRef": SECRET_KEY_REF | {
         "description": "Secret key holding the API key clients must send; exposed to "
                        "the runtime as KUBELLM_API_KEY."},
     "env": _free("Extra environment variables of the runtime container "
                  "(core/v1 EnvVar).", "array")},
    required=["model"])

# --- Day-2 operations: model cache, rollouts, scheduling ---------------------------------
# Kept apart from the blocks above (and added to MODEL and SPEC below them) so that other
# additions to those blocks merge without touching these lines.
LABEL_MAP_MAX = 64

MODEL_CACHE = _obj(
    "Keep the weights on a PersistentVolumeClaim: a loader Job downloads them once per "
    "model and revision (`kubellm download`), and every pod mounts the claim read-only "
    "and starts only once it is filled (condition ModelCached). Only for huggingFace "
    "sources. `cache: {}` makes a claim sized from the model.",
    {"claimName": _f("string", "An existing claim to use; the operator neither creates "
                               "nor deletes it. Unset: the operator creates "
                               "<name>-model-cache.", minLength=1, maxLength=253),
     "size": _quantity("Size of the claim the operator creates, e.g. 40Gi. Unset: the "
                       "weights' size (from spec.model.parameters or the model's name) "
                       "plus a quarter, at least 10Gi."),
     "storageClassName": _f("string", "StorageClass of the claim the operator creates; "
                                      "unset: the cluster's default.", maxLength=253),
     "accessMode": _f("string", "How the claim attaches. ReadWriteOnce: to one node at a "
                                "time, so every pod of this LLMDeployment is scheduled "
                                "onto one node (replicas beyond its GPUs stay Pending; "
                                "multi-node replicas are refused). ReadWriteMany (NFS, "
                                "CephFS, Filestore, EFS): pods spread over nodes.",
                      enum=["ReadWriteOnce", "ReadWriteMany"], default="ReadWriteOnce"),
     "whenDeleted": _f("string", "What happens to the claim the operator created when the "
                                 "LLMDeployment is deleted (or the cache is turned off): "
                                 "Retain keeps it, and an LLMDeployment of the same name "
                                 "adopts it again; Delete removes it.",
                       enum=["Retain", "Delete"], default="Retain")})

ROLLOUT = _obj(
    "How pods are replaced when the spec changes, and how long a starting pod may take.",
    {"maxSurge": _quantity("Pods (a number or a percentage of replicas) started above "
                           "spec.replicas during a rollout; each needs its GPUs free. The "
                           "default 1 starts the new pod beside the old one, which serves "
                           "until the new one is Ready.", default=1),
     "maxUnavailable": _quantity("Pods (a number or a percentage) that may be down during "
                                 "a rollout. 1 with maxSurge 0 replaces pods in place, for "
                                 "clusters without a spare GPU (an outage with one "
                                 "replica).", default=0),
     "startupTimeoutSeconds": _f("integer", "Longest a pod may take from start to serving "
                                            "(download and load of the weights) before the "
                                            "kubelet restarts it. Unset: sized from the "
                                            "model's size and where its weights come from.",
                                 minimum=60, maximum=86400)},
    default={})

DAY2_SPEC_FIELDS: dict[str, Schema] = {
    "rollout": ROLLOUT,
    "topologySpreadConstraints": {
        "type": "array", "maxItems": 16,
        "description": "Pod topology spread constraints (core/v1 "
                       "TopologySpreadConstraint) of the pods that serve the model.",
        "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
    "priorityClassName": _f("string", "PriorityClass of every pod (the Endpoint "
                                             "Picker's and the activator's too).",
                            maxLength=253),
    "runtimeClassName": _f("string", "RuntimeClass of the pods that serve the model "
                                                "(e.g. nvidia).",
                           maxLength=253),
    "podLabels": {"type": "object", "maxProperties": LABEL_MAP_MAX,
                  "description": "Extra labels on every pod (not the app.kubernetes.io/ "
                                 "or kubellm.io/ labels the operator selects pods by).",
                  "additionalProperties": {"type": "string", "maxLength": 63}},
    "podAnnotations": {"type": "object", "maxProperties": LABEL_MAP_MAX,
                       "description": "Extra annotations on every pod.",
                       "additionalProperties": {"type": "string"}},
}
MODEL["properties"]["cache"] = MODEL_CACHE
SPEC["properties"].update(DAY2_SPEC_FIELDS)

# --- Cluster-wide serving: inference-aware routing, scale from zero ----------------------
ROUTING = _obj(
    "Inference-aware routing through the Gateway API Inference Extension: an "
    "InferencePool (inference.networking.k8s.io/v1) of the serving pods and an Endpoint "
    "Picker that chooses a pod per request from their queue depth, KV-cache use and "
    "prefix-cache hits. A gateway that supports InferencePools routes to it (an HTTPRoute "
    "whose backendRef is the pool); the Service stays as it is.",
    {"enabled": _f("boolean", "Create the InferencePool and its Endpoint Picker.",
                   default=False),
     "endpointPicker": _obj(
         "The Endpoint Picker (EPP) Deployment, Service and RBAC the operator creates.",
         {"image": _f("string", "EPP image; unset: the operator's --epp-image (the "
                                "upstream release it was tested with).", minLength=1,
                      maxLength=512),
          "pluginsConfig": _f("string", "The EPP's EndpointPickerConfig (YAML). Unset: "
                                        "queue-scorer (weight 2), kv-cache-utilization-"
                                        "scorer (2) and prefix-cache-scorer (3).",
                              maxLength=65536),
          "failureMode": _f("string", "What the gateway does when the EPP does not "
                                      "answer: FailClose rejects the request, FailOpen "
                                      "sends it to any pod of the pool.",
                            enum=["FailOpen", "FailClose"], default="FailClose"),
          "extraArgs": {"type": "array", "maxItems": 32,
                        "description": "Further EPP flags, appended as they are.",
                        "items": {"type": "string", "maxLength": 256}},
          "resources": _free("Resources of the EPP container (core/v1 "
                             "ResourceRequirements). Unset: 1 CPU and 1Gi requested.")},
         default={})},
    default={})
SPEC["properties"]["routing"] = ROUTING
AUTOSCALING["properties"]["minReplicas"] = _f(
    "integer", "Lower bound of replicas. 0 scales to zero after scaleToZeroAfterSeconds "
               "without requests; the first request then waits while a replica starts "
               "(operator mode: an activator holds it; keda mode: the KEDA HTTP add-on, or "
               "the Endpoint Picker's flow control with routing enabled).",
    minimum=0, default=1)
AUTOSCALING["properties"]["scaleToZeroAfterSeconds"] = _f(
    "integer", "With minReplicas 0: how long no request may wait or run on any replica "
               "before the last one is removed (a cold start costs minutes of weight "
               "loading, so longer than the scale-down window).",
    minimum=30, maximum=86400, default=600)

CONDITION = _obj(
    "One observation of the LLMDeployment's state.",
    {"type": _f("string", "Ready, Progressing, Degraded, ScalingActive, ..."),
     "status": _f("string", "True, False or Unknown.", enum=["True", "False", "Unknown"]),
     "reason": _f("string", "CamelCase reason of the last transition."),
     "message": _f("string", "Human-readable detail."),
     "lastTransitionTime": _f("string", "When status last changed.", format="date-time"),
     "observedGeneration": _f("integer", "Generation this condition was computed for.")},
    required=["type", "status"])

STATUS = _obj(
    "Observed state, written by the operator.",
    {"model": _f("string", "Model name the API serves."),
     "phase": _f("string", "Summary: Pending, Progressing, Ready or Degraded.",
                 enum=["Pending", "Progressing", "Ready", "Degraded"]),
     "replicas": _f("integer", "Replicas that exist (the scale subresource's status)."),
     "readyReplicas": _f("integer", "Replicas that serve traffic."),
     "selector": _f("string", "Label selector of the serving pods (scale subresource)."),
     "endpoint": _f("string", "In-cluster URL of the OpenAI-compatible API."),
     "observedGeneration": _f("integer", "metadata.generation the status reflects."),
     "conditions": {"type": "array", "description": "Ready, Progressing, Degraded and "
                    "the autoscaler's ScalingActive.", "items": CONDITION,
                    "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
     "queueDepth": _f("number", "Averaged waiting requests over all replicas "
                                "(autoscaler)."),
     "desiredReplicas": _f("integer", "Replicas the autoscaler last asked for."),
     "lastScaleTime": _f("string", "When the autoscaler last changed replicas.",
                         format="date-time"),
     "autoscaler": {"type": "object", "description": "The autoscaler's own state (its "
                    "metric window), kept on the object across operator restarts.",
                    "x-kubernetes-preserve-unknown-fields": True},
     "routing": _obj("Where a gateway routes to this LLMDeployment (spec.routing).",
                     {"inferencePool": _f("string", "Name of the InferencePool."),
                      "endpointPicker": _f("string", "host:port of the Endpoint Picker's "
                                                     "ext-proc gRPC Service.")}),
     "coldStart": _obj("Scale from zero: how long the first replica took to be Ready.",
                       {"startedAt": _f("string", "When replicas went from 0 to more "
                                                  "(cleared once one is Ready).",
                                        format="date-time"),
                        "lastSeconds": _f("number", "Seconds from the last scale from "
                                                    "zero to the first Ready replica."),
                        "lastReadyAt": _f("string", "When that replica turned Ready.",
                                          format="date-time")})})
