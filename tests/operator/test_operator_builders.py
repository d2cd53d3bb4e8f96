"""Pure builders: spec -> manifests, checked without any cluster."""
from __future__ import annotations

import sys

import kubernetes_validate
import pytest
import yaml

from kubellm.operator import rendezvous as rdv
from kubellm.operator.builders import model_cache as mc
from kubellm.operator.builders.children import Topology, build_children, topology
from kubellm.operator.builders.pod import serve_args
from kubellm.operator.validation import SpecError, defaulted_spec
from tests.thirdparty_crds import crd_errors

from tests.paths import ROOT
K8S_VERSION = "1.31.0"


def cr(spec: dict, name: str = "m", namespace: str = "ns") -> dict:
    return {"apiVersion": "kubellm.io/v1alpha1", "kind": "LLMDeployment",
            "metadata": {"name": name, "namespace": namespace, "uid": "uid-1"}, "spec": spec}


def children(spec: dict, lws: bool = False) -> dict[tuple[str, str], dict]:
    body = cr(spec)
    built = build_children(body, defaulted_spec(spec), image="img:1", lws_available=lws)
    return {(c["kind"], c["metadata"]["name"]): c for c in built}


def pod_of(workload: dict, template: str = "template") -> dict:
    return workload["spec"][template]["spec"]


def env_of(pod: dict) -> dict[str, dict]:
    return {e["name"]: e for e in pod["containers"][0]["env"]}


HF = {"source": {"huggingFace": "org/model"}}


@pytest.mark.parametrize("tensor, pipeline, gpus", [(1, 1, "1"), (4, 1, "4"), (2, 2, "4"),
                                                    (8, 1, "8")])
def test_single_node_deployment_requests_tensor_times_pipeline_gpus(tensor, pipeline, gpus):
    built = children({"model": HF, "parallelism": {"tensor": tensor, "pipeline": pipeline},
                      "replicas": 3})
    assert set(built) == {("Service", "m"), ("Deployment", "m"), ("PodDisruptionBudget", "m")}
    dep = built[("Deployment", "m")]
    assert dep["spec"]["replicas"] == 3
    c = pod_of(dep)["containers"][0]
    assert c["resources"]["limits"] == {"nvidia.com/gpu": gpus}
    args = c["args"]
    assert args[args.index("--tensor-parallel-size") + 1] == str(tensor)
    assert args[args.index("--pipeline-parallel-size") + 1] == str(pipeline)
    assert rdv.MASTER_ADDR not in env_of(pod_of(dep))


def test_serve_args_carry_model_and_engine_knobs():
    spec = defaulted_spec({"model": {**HF, "name": "chat", "dtype": "bfloat16",
                                     "maxModelLen": 4096, "revision": "v2"},
                           "engine": {"gpuMemoryUtilization": 0.85, "maxNumSeqs": 32,
                                      "maxNumBatchedTokens": 2048, "blockSize": 32,
                                      "kvCacheDtype": "fp8", "enablePrefixCaching": False,
                                      "schedulingPolicy": "priority", "enforceEager": True,
                                      "seed": 7, "maxQueue": 100,
                                      "shutdownTimeoutSeconds": 45,
                                      "extraArgs": ["--foo", "1"]}})
    assert serve_args(spec, "m") == [
        "serve", "org/model", "--served-model-name", "chat", "--host", "0.0.0.0",
        "--port", "8000", "--tensor-parallel-size", "1", "--pipeline-parallel-size", "1",
        "--dtype", "bfloat16", "--shutdown-timeout", "45", "--max-model-len", "4096",
        "--gpu-memory-utilization", "0.85", "--max-num-seqs", "32",
        "--max-num-batched-tokens", "2048", "--block-size", "32", "--kv-cache-dtype", "fp8",
        "--no-enable-prefix-caching", "--scheduling-policy", "priority", "--enforce-eager",
        "--seed", "7", "--max-queue", "100", "--foo", "1"]


def test_unset_knobs_are_left_to_the_runtime():
    args = serve_args(defaulted_spec({"model": HF}), "m")
    assert "--served-model-name" in args and args[args.index("--served-model-name") + 1] == "m"
    for flag in ("--max-model-len", "--gpu-memory-utilization", "--enforce-eager", "--seed",
                 "--enable-prefix-caching", "--no-enable-prefix-caching", "--revision"):
        assert flag not in args


def test_pod_probes_lifecycle_and_security():
    spec = {"model": HF, "engine": {"shutdownTimeoutSeconds": 60},
            "resources": {"sharedMemory": "4Gi", "cpu": 8, "memory": "32Gi"}}
    pod = pod_of(children(spec)[("Deployment", "m")])
    c = pod["containers"][0]
    assert c["ports"][0] == {"name": "http", "containerPort": 8000, "protocol": "TCP"}
    assert c["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert c["livenessProbe"]["httpGet"]["path"] == "/health"
    startup = c["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 1800  # weight loading
    sleep = int(c["lifecycle"]["preStop"]["exec"]["command"][-1])
    assert pod["terminationGracePeriodSeconds"] > sleep + 60
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "4Gi"}
    assert {"name": "dshm", "mountPath": "/dev/shm"} in c["volumeMounts"]
    # /dev/shm is memory: the pod's request and limit hold it on top of the runtime's.
    assert c["resources"]["requests"] == {"cpu": "8", "memory": "36Gi"}
    assert c["resources"]["limits"]["memory"] == "36Gi"


def test_api_key_and_hf_token_come_from_secrets():
    spec = {"model": {"source": {"huggingFace": "org/gated",
                                 "tokenSecretRef": {"name": "hf", "key": "token"}}},
            "apiKeySecretRef": {"name": "keys", "key": "api"},
            "env": [{"name": "EXTRA", "value": "1"}]}
    env = env_of(pod_of(children(spec)[("Deployment", "m")]))
    assert env["KUBELLM_API_KEY"]["valueFrom"] == {"secretKeyRef": {"name": "keys", "key": "api"}}
    assert env["HF_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "hf", "key": "token"}}
    assert env["EXTRA"]["value"] == "1"
    assert "KUBELLM_REVISION" not in env


def test_revision_reaches_the_runtime_through_its_env():
    spec = {"model": {**HF, "revision": "refs/pr/1"}}
    env = env_of(pod_of(children(spec)[("Deployment", "m")]))
    assert env["KUBELLM_REVISION"]["value"] == "refs/pr/1"


def test_pvc_model_is_mounted_read_only():
    spec = {"model": {"source": {"pvc": {"claimName": "weights", "path": "/llama/"}}}}
    pod = pod_of(children(spec)[("Deployment", "m")])
    assert pod["containers"][0]["args"][1] == "/models/llama"
    vol = next(v for v in pod["volumes"] if v["name"] == "model")
    assert vol["persistentVolumeClaim"] == {"claimName": "weights", "readOnly": True}


def test_multi_node_without_lws_is_statefulsets_with_rendezvous_env():
    spec = {"model": HF, "parallelism": {"tensor": 8, "pipeline": 2}, "replicas": 2}
    built = children(spec)
    assert set(built) == {("Service", "m"), ("Service", "m-pods"), ("StatefulSet", "m-g0"),
                          ("StatefulSet", "m-g1"), ("PodDisruptionBudget", "m")}
    sts = built[("StatefulSet", "m-g1")]
    assert sts["spec"]["replicas"] == 2 and sts["spec"]["serviceName"] == "m-pods"
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    pod = pod_of(sts)
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"
    env = env_of(pod)
    assert env[rdv.MASTER_ADDR]["value"] == "m-g1-0.m-pods.ns.svc"
    assert env[rdv.MASTER_PORT]["value"] == str(rdv.DEFAULT_MASTER_PORT)
    assert env[rdv.NNODES]["value"] == "2" and env[rdv.NPROC_PER_NODE]["value"] == "8"
    assert env[rdv.NODE_RANK]["valueFrom"]["fieldRef"]["fieldPath"] == \
        "metadata.labels['apps.kubernetes.io/pod-index']"
    headless = built[("Service", "m-pods")]
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    # Only stage 0 of each group serves HTTP.
    assert built[("Service", "m")]["spec"]["selector"]["apps.kubernetes.io/pod-index"] == "0"


def test_multi_node_with_lws_is_one_leader_worker_set():
    spec = {"model": HF, "parallelism": {"tensor": 4, "pipeline": 4, "gpusPerNode": 4},
            "replicas": 3}
    built = children(spec, lws=True)
    assert set(built) == {("Service", "m"), ("LeaderWorkerSet", "m"),
                          ("PodDisruptionBudget", "m")}
    lws = built[("LeaderWorkerSet", "m")]
    assert lws["spec"]["replicas"] == 3
    tmpl = lws["spec"]["leaderWorkerTemplate"]
    assert tmpl["size"] == 4
    leader, worker = tmpl["leaderTemplate"], tmpl["workerTemplate"]
    assert "readinessProbe" in leader["spec"]["containers"][0]
    assert "readinessProbe" not in worker["spec"]["containers"][0]
    env = env_of(worker["spec"])
    assert env[rdv.NODE_RANK]["valueFrom"]["fieldRef"]["fieldPath"] == \
        f"metadata.labels['{rdv.LWS_WORKER_INDEX_LABEL}']"
    assert env[rdv.NNODES]["value"] == "4"


def test_leader_worker_set_check_can_fail():
    lws = children({"model": HF, "parallelism": {"tensor": 8, "pipeline": 2}},
                   lws=True)[("LeaderWorkerSet", "m")]
    lws["spec"]["leaderWorkerTemplate"]["sizee"] = 2  # a typo the CRD would prune
    lws["spec"]["replicas"] = "two"
    errors = crd_errors(lws)
    assert any("sizee" in e for e in errors) and any("replicas" in e for e in errors), errors


def test_tensor_larger_than_a_node_cannot_be_placed():
    spec = defaulted_spec({"model": HF, "parallelism": {"tensor": 16}})
    with pytest.raises(SpecError, match=r"spec\.parallelism\.tensor \(16\) exceeds"):
        topology(spec, lws_available=True)
    assert topology(defaulted_spec({"model": HF, "parallelism": {"tensor": 8}}), False) \
        is Topology.SINGLE_NODE


def test_every_child_has_an_owner_reference_and_no_shared_dicts():
    spec = {"model": HF, "parallelism": {"tensor": 8, "pipeline": 2}, "replicas": 2}
    built = list(children(spec).values())
    for child in built:
        (ref,) = child["metadata"]["ownerReferences"]
        assert ref["uid"] == "uid-1" and ref["controller"] is True
    built[0]["metadata"]["labels"]["x"] = "y"
    assert all("x" not in c["metadata"]["labels"] for c in built[1:])


def _examples():
    return sorted((ROOT / "examples").glob("*.yaml"))


def test_the_examples_cover_the_issue():
    names = {p.stem for p in _examples()}
    assert {"single-gpu", "tensor-parallel-4", "multi-node-tp8-pp2", "autoscaling",
            "cpu-default-model", "model-cache"} <= names


@pytest.mark.parametrize("path", _examples(), ids=lambda p: p.name)
@pytest.mark.parametrize("lws", [False, True])
def test_every_example_renders_valid_manifests(path, lws):
    example = yaml.safe_load(path.read_text())
    example["metadata"].update(namespace="default", uid="uid-1")
    spec = defaulted_spec(example["spec"])
    extra = []
    if (plan := mc.cache_plan(example, spec)) is not None:  # the claim and the loader Job
        extra = [mc.build_cache_claim(example, spec, plan),
                 mc.build_loader_job(example, spec, plan, "img:1", 1)]
    for child in build_children(example, spec, image="img:1", lws_available=lws) + extra:
        if child["kind"] == "LeaderWorkerSet":
            assert crd_errors(child) == []  # LeaderWorkerSet's own published CRD
            for t in ("leaderTemplate", "workerTemplate"):  # validate its pod templates
                kubernetes_validate.validate(
                    {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"},
                     "template": child["spec"]["leaderWorkerTemplate"][t]},
                    K8S_VERSION, strict=True)
        else:
            kubernetes_validate.validate(child, K8S_VERSION, strict=True)


def _run_probe(command: list[str], port: int, rank: str) -> int:
    import os
    import subprocess

    script = command[-1].replace(":8000/", f":{port}/")
    env = {**os.environ, rdv.NODE_RANK: rank}
    return subprocess.run([sys.executable, "-c", script], env=env, timeout=30).returncode


def test_statefulset_probes_ask_http_only_on_rank_zero():
    """One template serves every rank: the exec probe passes on ranks > 0 and asks the
    HTTP server on rank 0 (here a real server on loopback answering 200, then 503)."""
    import http.server
    import threading

    spec = {"model": HF, "parallelism": {"tensor": 8, "pipeline": 2}}
    c = pod_of(children(spec)[("StatefulSet", "m-g0")])["containers"][0]
    command = c["readinessProbe"]["exec"]["command"]
    assert "/ready" in command[-1] and "/health" in c["livenessProbe"]["exec"]["command"][-1]

    answer = {"code": 200}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's naming)
            self.send_response(answer["code"] if self.path == "/ready" else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        assert _run_probe(command, port, "0") == 0
        assert _run_probe(command, port, "1") == 0
        answer["code"] = 503
        assert _run_probe(command, port, "0") != 0
        assert _run_probe(command, port, "1") == 0  # workers never serve HTTP
    finally:
        server.shutdown()


def all_pod_specs(built: dict[tuple[str, str], dict]) -> list[dict]:
    """Every pod template the children carry (Deployment, StatefulSets, LWS leader+worker)."""
    pods = []
    for (kind, _), child in built.items():
        if kind in ("Deployment", "StatefulSet"):
            pods.append(pod_of(child))
        elif kind == "LeaderWorkerSet":
            lws = child["spec"]["leaderWorkerTemplate"]
            pods += [lws["leaderTemplate"]["spec"], lws["workerTemplate"]["spec"]]
    return pods


TOPOLOGIES = {"deployment": ({"tensor": 2}, False),
              "statefulsets": ({"tensor": 8, "pipeline": 2}, False),
              "leaderworkerset": ({"tensor": 8, "pipeline": 2}, True)}


@pytest.mark.parametrize("topology_name", sorted(TOPOLOGIES))
def test_pods_get_no_service_links(topology_name):
    """A Service named `kubellm` (an LLMDeployment named kubellm gets one) would inject
    KUBELLM_PORT=tcp://..., which the runtime reads as its --port and refuses."""
    parallelism, lws = TOPOLOGIES[topology_name]
    built = children({"model": HF, "parallelism": parallelism}, lws=lws)
    pods = all_pod_specs(built)
    assert len(pods) >= 1
    for pod in pods:
        assert pod["enableServiceLinks"] is False


def test_liveness_stays_on_health_which_answers_while_draining():
    """Readiness (/ready) turns 503 on SIGTERM to drop the pod from endpoints; liveness
    must not, or the kubelet would kill a draining pod: it asks /health."""
    for topology_name, (parallelism, lws) in TOPOLOGIES.items():
        built = children({"model": HF, "parallelism": parallelism}, lws=lws)
        for pod in all_pod_specs(built):
            c = pod["containers"][0]
            if "livenessProbe" not in c:  # LWS workers serve no HTTP
                continue
            probe = c["livenessProbe"]
            target = probe.get("httpGet", {}).get("path") or probe["exec"]["command"][-1]
            assert "/health" in target and "/ready" not in target, topology_name
