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
     "memory": _quantity("Memory request and limit of one pod, e.g. 64Gi. Unset: a "
                         "request sized from the model and the layout."),
     "sharedMemory": _quantity("Size of the /dev/shm memory volume (NCCL, data "
                               "loading).", default="8Gi")},
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
     "nodeSelector": {"type": "object", "description": "Node labels the pods must match.",
                      "additionalProperties": {"type": "string"}},
     "tolerations": _free("Pod tolerations (core/v1 Toleration).", "array"),
     "affinity": _free("Pod affinity (core/v1 Affinity)."),
     "service": SERVICE,
     "networkPolicy": NETWORK_POLICY,
     "apiKeySecretRef": SECRET_KEY_REF | {
         "description": "Secret key holding the API key clients must send; exposed to "
                        "the runtime as KUBELLM_API_KEY."},
     "env": _free("Extra environment variables of the runtime container "
                  "(core/v1 EnvVar).", "array")},
    required=["model"])

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
                    "x-kubernetes-preserve-unknown-fields": True}})
