"""The runtime pod: `kubellm serve` arguments, env, probes, volumes, security.

Every function takes a defaulted spec (validation.defaulted_spec) and returns plain dicts.
"""
from __future__ import annotations

from typing import Any

from kubellm.operator.builders import model_cache, volumes
from kubellm.operator.builders.model_cache import CachePlan
from kubellm.operator.builders.quantity import format_bytes, to_bytes
from kubellm.operator.builders.scheduling import scheduling_fields
from kubellm.operator.builders.security import CONTAINER_SECURITY, POD_SECURITY, RUNTIME_UID  # noqa: F401
from kubellm.operator.builders.sizing import default_requests, uses_gpus
from kubellm.operator.builders.startup import startup_failure_threshold, startup_seconds
from kubellm.operator.builders.volumes import CACHE_MOUNT, MODEL_MOUNT
from kubellm.operator.rendezvous import NODE_RANK

HTTP_PORT = 8000  # the runtime's default --port; the Service maps spec.service.port to it
HTTP_PORT_NAME = "http"
PRESTOP_SLEEP_SECONDS = 5  # lets endpoints drop the pod before SIGTERM stops admission
GRACE_MARGIN_SECONDS = 10  # on top of preStop + --shutdown-timeout, for process exit

# vLLM-style flag for each engine knob; booleans become --flag / --no-flag.
ENGINE_FLAGS = {
    "gpuMemoryUtilization": "--gpu-memory-utilization",
    "maxNumSeqs": "--max-num-seqs",
    "maxNumBatchedTokens": "--max-num-batched-tokens",
    "blockSize": "--block-size",
    "kvCacheDtype": "--kv-cache-dtype",
    "enablePrefixCaching": "--enable-prefix-caching",
    "schedulingPolicy": "--scheduling-policy",
    "enforceEager": "--enforce-eager",
    "seed": "--seed",
    "maxQueue": "--max-queue",
}


def served_model_name(spec: dict[str, Any], name: str) -> str:
    return spec["model"].get("name") or name


def model_location(spec: dict[str, Any]) -> str | None:
    """What `kubellm serve` loads: a Hugging Face id, a folder on the mounted PVC, or
    None for the model embedded in the runtime image (`kubellm serve` without a model)."""
    source = spec["model"]["source"]
    if "embedded" in source:
        return None
    if "huggingFace" in source:
        return source["huggingFace"]
    path = source["pvc"].get("path", "").strip("/")
    return f"{MODEL_MOUNT}/{path}" if path else MODEL_MOUNT


def serve_args(spec: dict[str, Any], name: str) -> list[str]:
    model, par, engine = spec["model"], spec["parallelism"], spec["engine"]
    location = model_location(spec)
    args = ["serve", *([location] if location else []),
            "--served-model-name", served_model_name(spec, name),
            "--host", "0.0.0.0", "--port", str(HTTP_PORT),
            "--tensor-parallel-size", str(par["tensor"]),
            "--pipeline-parallel-size", str(par["pipeline"]),
            "--dtype", model["dtype"],
            "--shutdown-timeout", str(engine["shutdownTimeoutSeconds"])]
    if not uses_gpus(spec):
        args += ["--device", "cpu"]
    if "maxModelLen" in model:
        args += ["--max-model-len", str(model["maxModelLen"])]
    if model.get("quantization"):
        args += ["--quantization", model["quantization"]]
    for key, flag in ENGINE_FLAGS.items():
        if key not in engine:
            continue
        value = engine[key]
        if isinstance(value, bool):
            if key == "enforceEager":
                args += [flag] if value else []
            else:
                args.append(flag if value else flag.replace("--", "--no-", 1))
        else:
            args += [flag, str(value)]
    return args + list(engine.get("extraArgs", []))


def _secret_env(env_name: str, ref: dict[str, str]) -> dict[str, Any]:
    return {"name": env_name,
            "valueFrom": {"secretKeyRef": {"name": ref["name"], "key": ref["key"]}}}


def runtime_env(spec: dict[str, Any], extra: list[dict[str, Any]],
                plan: CachePlan | None = None) -> list[dict[str, Any]]:
    """Env of the runtime container; ``extra`` (e.g. rendezvous) comes before the user's."""
    # The root filesystem is read-only: every cache goes to the writable /cache volume.
    env = [{"name": "HOME", "value": CACHE_MOUNT},
           {"name": "XDG_CACHE_HOME", "value": CACHE_MOUNT},
           {"name": "HF_HOME", "value": f"{CACHE_MOUNT}/huggingface"}]
    if plan is not None:
        env += model_cache.serving_env()
    if "apiKeySecretRef" in spec:
        env.append(_secret_env("KUBELLM_API_KEY", spec["apiKeySecretRef"]))
    if spec["model"].get("revision"):
        # `kubellm serve` has no flag for it; the runtime's KUBELLM_<FIELD> env reads it.
        env.append({"name": "KUBELLM_REVISION", "value": spec["model"]["revision"]})
    if "tokenSecretRef" in spec["model"]["source"]:
        env.append(_secret_env("HF_TOKEN", spec["model"]["source"]["tokenSecretRef"]))
    return env + extra + list(spec.get("env", []))


class Probes:
    """Which health checks a pod template gets."""
    HTTP = "http"  # every pod serves HTTP (Deployment pods, LWS leaders)
    NONE = "none"  # no pod serves HTTP (LWS workers)
    # One template for every rank (StatefulSet groups): only rank 0 serves HTTP, so the
    # check asks /ready and /health on rank 0 and passes on the other ranks.
    RANK_ZERO_HTTP = "rank-zero-http"


_RANK_ZERO_CHECK = (
    "import os, sys, urllib.request\n"
    "if os.environ.get('{rank}', '0') != '0': sys.exit(0)\n"
    "urllib.request.urlopen('http://127.0.0.1:{port}{{path}}', timeout=4)\n"
)


def _check(kind: str, path: str) -> dict[str, Any]:
    if kind == Probes.HTTP:
        return {"httpGet": {"path": path, "port": HTTP_PORT_NAME}}
    script = _RANK_ZERO_CHECK.format(rank=NODE_RANK, port=HTTP_PORT).format(path=path)
    return {"exec": {"command": ["python3", "-c", script]}}


def probes(kind: str, startup_budget_seconds: int) -> dict[str, Any]:
    if kind == Probes.NONE:
        return {}
    return {
        # Weight download + load take minutes, sized from the model (startup.py); liveness
        # starts only once /health has answered.
        "startupProbe": {**_check(kind, "/health"), "periodSeconds": 10,
                         "failureThreshold": startup_failure_threshold(startup_budget_seconds),
                         "timeoutSeconds": 5},
        "readinessProbe": {**_check(kind, "/ready"), "periodSeconds": 5,
                           "failureThreshold": 3, "timeoutSeconds": 5},
        "livenessProbe": {**_check(kind, "/health"), "periodSeconds": 10,
                          "failureThreshold": 6, "timeoutSeconds": 5},
    }


def resources(spec: dict[str, Any], processes: int, pods_per_replica: int) -> dict[str, Any]:
    """GPUs as limits; CPU and memory as the user set them (request = limit), else
    requests sized from the model and the layout (sizing.py), so no pod is BestEffort.
    The memory-backed /dev/shm counts against the pod's memory: both are raised by it."""
    res = spec["resources"]
    limits: dict[str, str] = {res["gpuResourceName"]: str(processes)} if uses_gpus(spec) else {}
    requests = default_requests(spec, processes, pods_per_replica)
    for key in ("cpu", "memory"):
        if key in res:
            limits[key] = requests[key] = str(res[key])
    shm = volumes.shared_memory_bytes(spec, processes)
    for amounts in (requests, limits):
        if "memory" in amounts:
            field = "spec.resources.memory"
            amounts["memory"] = format_bytes(to_bytes(amounts["memory"], field) + shm)
    if (scratch := volumes.scratch_bytes(spec)) is not None:
        requests["ephemeral-storage"] = format_bytes(scratch)
    return {**({"limits": limits} if limits else {}), "requests": requests}


def container(spec: dict[str, Any], name: str, *, processes: int, pods_per_replica: int,
              image: str, plan: CachePlan | None,
              extra_env: list[dict[str, Any]], extra_ports: list[dict[str, Any]],
              probe_kind: str) -> dict[str, Any]:
    ports = [{"name": HTTP_PORT_NAME, "containerPort": HTTP_PORT, "protocol": "TCP"}]
    c = {"name": "runtime", "image": image, "command": ["kubellm"],
         "args": serve_args(spec, name),
         "ports": ports + extra_ports,  # the HTTP port first: the autoscaler scrapes it
         "env": runtime_env(spec, extra_env, plan),
         "resources": resources(spec, processes, pods_per_replica),
         "volumeMounts": volumes.mounts(spec, plan),
         "securityContext": CONTAINER_SECURITY,
         "lifecycle": {"preStop": {"exec": {
             "command": ["sleep", str(PRESTOP_SLEEP_SECONDS)]}}},
         **probes(probe_kind, startup_seconds(spec, pods_per_replica))}
    if "imagePullPolicy" in spec:
        c["imagePullPolicy"] = spec["imagePullPolicy"]
    return c


def pod_spec(spec: dict[str, Any], name: str, *, processes: int, image: str,
             pods_per_replica: int = 1, plan: CachePlan | None = None,
             extra_env: list[dict[str, Any]] | None = None,
             extra_ports: list[dict[str, Any]] | None = None,
             probe_kind: str = Probes.HTTP) -> dict[str, Any]:
    grace = (PRESTOP_SLEEP_SECONDS + spec["engine"]["shutdownTimeoutSeconds"]
             + GRACE_MARGIN_SECONDS)
    colocate = plan is not None and plan.access_mode == "ReadWriteOnce"
    return {
        "containers": [container(spec, name, processes=processes,
                                 pods_per_replica=pods_per_replica, image=image, plan=plan,
                                 extra_env=extra_env or [], extra_ports=extra_ports or [],
                                 probe_kind=probe_kind)],
        "volumes": volumes.volumes(spec, plan, processes=processes),
        "securityContext": POD_SECURITY,
        # The runtime never calls the Kubernetes API: no token in the pod to steal.
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": grace,
        # Docker-link env of every Service in the namespace: a Service named `kubellm`
        # would set KUBELLM_PORT=tcp://..., which the runtime reads as its port and refuses.
        "enableServiceLinks": False,
        **scheduling_fields(spec, name, gpu_pod=uses_gpus(spec), colocate=colocate),
    }
