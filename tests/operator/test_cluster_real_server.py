"""What only a real API server (and real pods) can show, replayed on a cluster (KUBECONFIG).

Stands for the emulated tests of the same behaviour: CRD registration
(test_crd_registration.py), no takeover (test_operator_name_conflicts.py), hardened pods
and NetworkPolicies (test_operator_hardening.py), the CPU-only example
(test_cpu_pod_contract.py). tests/k8s/README.md says what a cluster needs; without
KUBECONFIG every test here is skipped with that reason.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

import pytest
import yaml

from tests.thirdparty_crds import FILES, crds_dir

from .test_operator_cluster import ROOT, get, kubectl, llmd, wait_for

pytestmark = [
    pytest.mark.k8s,
    pytest.mark.skipif(not os.environ.get("KUBECONFIG"),
                       reason="needs a real cluster: set KUBECONFIG (tests/k8s/README.md)"),
]
IMAGE = os.environ.get("KUBELLM_TEST_IMAGE")
HF_SPEC = {"model": {"source": {"huggingFace": "Qwen/Qwen2.5-0.5B-Instruct"}}}


@pytest.fixture(scope="module")
def namespace():
    ns = f"kubellm-real-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", ns)
    yield ns
    kubectl("delete", "namespace", ns, "--wait=false", check=False)


@pytest.fixture(scope="module")
def operator(namespace, tmp_path_factory):
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kubellm.operator", "--namespace", namespace,
         "--resync-seconds", "2", "--liveness-port", "0", "--log-format", "plain",
         "--default-image", IMAGE or "kubellm:test"],
        stdout=log.open("a"), stderr=subprocess.STDOUT)
    yield proc
    proc.terminate()
    proc.wait(timeout=20)


def test_crds_register_and_every_example_passes_server_validation(namespace):
    """Server: CRD registration (rules on raw defaults, structural schema, cost)."""
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
    kubectl("wait", "--for=condition=Established", "crd/llmdeployments.kubellm.io",
            "--timeout=60s")
    for example in sorted((ROOT / "examples").glob("*.yaml")):
        kubectl("apply", "--dry-run=server", "-n", namespace, "-f", str(example))


def test_emitted_third_party_objects_pass_their_real_crds(namespace):
    """Server: the ScaledObject and LeaderWorkerSet we build, against installed CRDs."""
    from kubellm.operator.autoscaling.keda import build_scaled_object
    from kubellm.operator.builders.children import build_children
    from kubellm.operator.validation import defaulted_spec

    if not crds_dir().is_dir():
        pytest.skip(reason=f"no third-party CRDs at {crds_dir()}")
    for name in FILES.values():
        kubectl("apply", "--server-side", "-f", str(crds_dir() / name))
    spec = {"model": {"source": {"huggingFace": "org/big"}}, "replicas": 1,
            "parallelism": {"tensor": 8, "pipeline": 2},
            "autoscaling": {"enabled": True, "mode": "keda", "maxReplicas": 3}}
    cr = {"apiVersion": "kubellm.io/v1alpha1", "kind": "LLMDeployment",
          "metadata": {"name": "big", "namespace": namespace, "uid": "u"}, "spec": spec}
    objects = [build_scaled_object("big", namespace, defaulted_spec(spec), "u")]
    objects += [c for c in build_children(cr, defaulted_spec(spec), image="img",
                                          lws_available=True)
                if c["kind"] == "LeaderWorkerSet"]
    for obj in objects:
        obj["metadata"].pop("ownerReferences", None)  # the owner "u" does not exist
        kubectl("apply", "--dry-run=server", "-f", "-", stdin=json.dumps(obj))


def test_a_users_objects_are_never_taken_over(namespace, operator):
    ns = namespace
    kubectl("create", "deployment", "web", "-n", ns, "--image=nginx", "--replicas=0")
    kubectl("create", "service", "clusterip", "web", "-n", ns, "--tcp=80:80")
    before = {kind: get(kind, "web", ns) for kind in ("deployment", "service")}
    kubectl("apply", "-f", "-", stdin=llmd("web", ns, HF_SPEC))
    status = wait_for(lambda: (s := (get("llmd", "web", ns) or {}).get("status", {}))
                      and any(c["reason"] == "NameConflict" for c in s.get("conditions", []))
                      and s, what="NameConflict")
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert f"Deployment {ns}/web already exists" in degraded["message"]
    for kind, obj in before.items():
        after = get(kind, "web", ns)
        assert after["spec"] == obj["spec"] and not after["metadata"].get("ownerReferences")
    kubectl("delete", "llmd", "web", "-n", ns, "--wait=true", "--timeout=60s")
    time.sleep(5)  # the garbage collector had its chance
    assert get("deployment", "web", ns) and get("service", "web", ns)
    kubectl("delete", "deployment,service", "web", "-n", ns)


def test_pods_are_hardened_and_the_network_policy_is_created(namespace, operator):
    ns = namespace
    spec = {**HF_SPEC, "networkPolicy": {"enabled": True}}
    kubectl("apply", "-f", "-", stdin=llmd("locked", ns, spec))
    dep = wait_for(lambda: get("deployment", "locked", ns), what="Deployment")
    pod = dep["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert {"cpu", "memory"} <= set(pod["containers"][0]["resources"]["requests"])
    policy = wait_for(lambda: get("networkpolicy", "locked", ns), what="NetworkPolicy")
    assert policy["metadata"]["ownerReferences"][0]["name"] == "locked"


@pytest.mark.skipif(not IMAGE, reason="needs the runtime image loaded into the cluster: "
                                      "set KUBELLM_TEST_IMAGE (tests/k8s/README.md)")
def test_cpu_example_serves_on_a_cluster_without_gpus(namespace, operator):
    ns = namespace
    example = yaml.safe_load((ROOT / "examples" / "cpu-default-model.yaml").read_text())
    example["metadata"]["namespace"] = ns
    example["spec"]["imagePullPolicy"] = "IfNotPresent"
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump(example))
    wait_for(lambda: (get("llmd", "smollm2", ns) or {}).get("status", {}).get("phase")
             == "Ready", timeout=900, what="smollm2 Ready")
    body = json.dumps({"model": "smollm2", "max_tokens": 8, "temperature": 0,
                       "messages": [{"role": "user",
                                     "content": "What is the capital of France?"}]})
    script = ("import urllib.request, sys; r = urllib.request.Request("
              f"'http://smollm2.{ns}.svc:8000/v1/chat/completions', data=sys.argv[1].encode(), "
              "headers={'Content-Type': 'application/json'}); "
              "print(urllib.request.urlopen(r, timeout=60).read().decode())")
    result = kubectl("run", "client", "-n", ns, "--rm", "-i", "--restart=Never",
                     f"--image={IMAGE}", "--image-pull-policy=IfNotPresent",
                     "--command", "--", "python3", "-c", script, body)
    assert "Paris" in result.stdout, result.stdout
