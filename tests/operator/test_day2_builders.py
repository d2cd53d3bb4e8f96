"""Day-2 fields in the built manifests: scheduling, shared memory, the model cache's claim
and loader Job, and the rollout of multi-node replicas."""
from __future__ import annotations

import kubernetes_validate
import pytest

from kubellm.operator.builders import model_cache as mc
from kubellm.operator.builders.children import build_children
from kubellm.operator.validation import SpecError, defaulted_spec
from tests.thirdparty_crds import crd_errors

from .test_operator_builders import K8S_VERSION, all_pod_specs, cr

HF = {"source": {"huggingFace": "Qwen/Qwen2.5-7B-Instruct"}}
SCHEDULING = {
    "nodeSelector": {"gpu": "h100"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "llm",
                     "effect": "NoSchedule"}],
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
    "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                   "whenUnsatisfiable": "ScheduleAnyway",
                                   "labelSelector": {"matchLabels": {"team": "a"}}}],
    "priorityClassName": "inference-high",
    "runtimeClassName": "nvidia",
    "podLabels": {"team": "a"},
    "podAnnotations": {"prometheus.io/scrape": "true"},
}
LAYOUTS = {"deployment": ({"tensor": 2}, False),
           "statefulsets": ({"tensor": 8, "pipeline": 2}, False),
           "leaderworkerset": ({"tensor": 8, "pipeline": 2}, True)}


def built(spec: dict, lws: bool = False) -> dict[tuple[str, str], dict]:
    return {(c["kind"], c["metadata"]["name"]): c for c in
            build_children(cr(spec), defaulted_spec(spec), image="img", lws_available=lws)}


def templates(children: dict) -> list[dict]:
    found = []
    for (kind, _), child in children.items():
        if kind in ("Deployment", "StatefulSet"):
            found.append(child["spec"]["template"])
        elif kind == "LeaderWorkerSet":
            lws = child["spec"]["leaderWorkerTemplate"]
            found += [lws["leaderTemplate"], lws["workerTemplate"]]
    return found


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_scheduling_fields_reach_every_pod(layout):
    parallelism, lws = LAYOUTS[layout]
    children = built({"model": HF, "parallelism": parallelism, **SCHEDULING}, lws)
    pods = templates(children)
    assert len(pods) >= 1
    for template in pods:
        pod = template["spec"]
        for key in ("nodeSelector", "affinity", "topologySpreadConstraints",
                    "priorityClassName", "runtimeClassName"):
            assert pod[key] == SCHEDULING[key], key
        # The user's toleration, and the GPU taint's.
        assert pod["tolerations"] == SCHEDULING["tolerations"] + [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        assert template["metadata"]["labels"]["team"] == "a"
        assert template["metadata"]["labels"]["app.kubernetes.io/name"] == "kubellm"
        assert template["metadata"]["annotations"] == SCHEDULING["podAnnotations"]


def test_gpu_taint_tolerated_by_default_unless_named_or_on_cpu():
    [pod] = all_pod_specs(built({"model": HF}))
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists",
                                   "effect": "NoSchedule"}]
    own = [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "a100",
            "effect": "NoSchedule"}]
    [pod] = all_pod_specs(built({"model": HF, "tolerations": own}))
    assert pod["tolerations"] == own
    [pod] = all_pod_specs(built({"model": HF, "resources": {"accelerator": "none"}}))
    assert "tolerations" not in pod
    [pod] = all_pod_specs(built({"model": HF, "resources": {"gpuResourceName": "amd.com/gpu"}}))
    assert pod["tolerations"][0]["key"] == "amd.com/gpu"


def test_pod_labels_cannot_take_the_selector_labels():
    with pytest.raises(SpecError, match="spec.podLabels"):
        defaulted_spec({"model": HF, "podLabels": {"app.kubernetes.io/instance": "x"}})


@pytest.mark.parametrize("tensor, shm, memory", [(1, "2Gi", None), (8, "9Gi", None),
                                                 (2, "16Gi", "64Gi")])
def test_shared_memory_is_sized_and_counted_as_memory(tensor, shm, memory):
    spec = {"model": HF, "parallelism": {"tensor": tensor},
            "resources": {**({"sharedMemory": shm} if memory else {}),
                          **({"memory": memory} if memory else {})}}
    [pod] = all_pod_specs(built(spec))
    volume = next(v for v in pod["volumes"] if v["name"] == "dshm")
    assert volume["emptyDir"]["sizeLimit"] == shm
    resources = pod["containers"][0]["resources"]
    if memory:  # the user's memory is the runtime's; the pod holds shm on top
        assert resources["requests"]["memory"] == resources["limits"]["memory"] == "80Gi"
    else:
        base = {1: 4 + 5, 8: 4 + 2 * 7 + 5}[tensor]  # sizing.py's request without shm
        assert resources["requests"]["memory"] == f"{base + int(shm[:-2])}Gi"


def test_downloading_pods_request_the_disk_the_weights_take():
    [pod] = all_pod_specs(built({"model": HF}))
    requests = pod["containers"][0]["resources"]["requests"]
    assert requests["ephemeral-storage"] == "15Gi"  # 13.04 GiB of bf16 weights + 1
    scratch = next(v for v in pod["volumes"] if v["name"] == "cache")
    assert scratch["emptyDir"] == {"sizeLimit": "23Gi"}  # evicted only far beyond
    [cached] = all_pod_specs(built({"model": {**HF, "cache": {}}}))
    assert "ephemeral-storage" not in cached["containers"][0]["resources"]["requests"]


def test_cache_claim_and_loader_job():
    spec = defaulted_spec({"model": {**HF, "revision": "abc", "cache": {
        "storageClassName": "fast", "accessMode": "ReadWriteMany"},
        "source": {**HF["source"], "tokenSecretRef": {"name": "hf", "key": "t"}}},
        **SCHEDULING})
    body = cr(spec)
    plan = mc.cache_plan(body, spec)
    claim = mc.build_cache_claim(body, spec, plan)
    assert claim["spec"] == {"accessModes": ["ReadWriteMany"], "storageClassName": "fast",
                             "resources": {"requests": {"storage": "17Gi"}}}  # 13.04 x 1.25
    job = mc.build_loader_job(body, spec, plan, "img:1", attempt=2)
    assert job["metadata"]["name"] == f"m-cache-{plan.key[:8]}-2"
    assert len(mc.job_name("x" * 253, plan.key, 99)) <= 63
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["args"] == ["download", "Qwen/Qwen2.5-7B-Instruct", "--revision", "abc",
                                 "--summary-file", "/dev/termination-log"]
    env = {e["name"]: e for e in container["env"]}
    assert env["HF_HUB_CACHE"]["value"] == mc.HUB_CACHE
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "hf", "key": "t"}
    assert "nvidia.com/gpu" not in container["resources"].get("limits", {})
    assert pod["automountServiceAccountToken"] is False
    assert pod["nodeSelector"] == SCHEDULING["nodeSelector"]
    assert pod["priorityClassName"] == "inference-high"
    assert "runtimeClassName" not in pod and "topologySpreadConstraints" not in pod
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/name"] == mc.LOADER_NAME  # no server selector matches
    assert labels["team"] == "a"
    for obj in (claim, job):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_the_claim_size_needs_a_known_model_size():
    spec = defaulted_spec({"model": {"source": {"huggingFace": "org/mystery"}, "cache": {}}})
    with pytest.raises(SpecError, match="spec.model.cache.size"):
        mc.claim_bytes(spec)
    spec["model"]["cache"]["size"] = "500Gi"
    assert mc.claim_bytes(spec) == 500 * 1024 ** 3


def test_read_write_once_keeps_every_pod_on_one_node():
    [pod] = all_pod_specs(built({"model": {**HF, "cache": {}}, "replicas": 3}))
    [term] = pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term == {"labelSelector": {"matchLabels": {"app.kubernetes.io/name": "kubellm",
                                                      "app.kubernetes.io/instance": "m"}},
                    "topologyKey": "kubernetes.io/hostname"}
    [pod] = all_pod_specs(built({"model": {**HF, "cache": {"accessMode": "ReadWriteMany"}},
                                 "replicas": 3}))
    assert "affinity" not in pod
    with pytest.raises(SpecError, match="ReadWriteOnce attaches the claim to one node"):
        built({"model": {**HF, "cache": {}}, "parallelism": {"tensor": 8, "pipeline": 2}})


def test_multi_node_replicas_roll_through_the_leader_worker_set():
    children = built({"model": {**HF, "cache": {"accessMode": "ReadWriteMany"}},
                      "parallelism": {"tensor": 8, "pipeline": 2}, "replicas": 2}, lws=True)
    lws = children[("LeaderWorkerSet", "m")]
    assert lws["spec"]["rolloutStrategy"] == {"type": "RollingUpdate",
                                              "rollingUpdateConfiguration": {
                                                  "maxSurge": 1, "maxUnavailable": 0}}
    assert crd_errors(lws) == []
    for template in templates(children):
        mounts = {m["name"]: m for m in template["spec"]["containers"][0]["volumeMounts"]}
        assert mounts[mc.VOLUME_NAME]["readOnly"] is True  # every rank reads the cache
