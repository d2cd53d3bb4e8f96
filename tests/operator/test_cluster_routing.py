"""Routing and scale from zero on a real cluster (KUBECONFIG): the scenarios of
test_operator_routing.py with a real API server, and the activator holding a real request
while a real replica starts. tests/k8s/README.md says what each test needs."""
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
from .test_cluster_real_server import IMAGE

pytestmark = [
    pytest.mark.k8s,
    pytest.mark.skipif(not os.environ.get("KUBECONFIG"),
                       reason="needs a real cluster: set KUBECONFIG (tests/k8s/README.md)"),
]
OPERATOR_IMAGE = os.environ.get("KUBELLM_TEST_OPERATOR_IMAGE")
POOL_CRD = FILES[("inference.networking.k8s.io", "InferencePool")]


@pytest.fixture(scope="module")
def namespace():
    ns = f"kubellm-route-{uuid.uuid4().hex[:6]}"
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
    if not (crds_dir() / POOL_CRD).is_file():
        pytest.skip(reason=f"the InferencePool CRD is not at {crds_dir()}")
    kubectl("apply", "--server-side", "-f", str(crds_dir() / POOL_CRD))
    for crd in ("llmdeployments.kubellm.io", "inferencepools.inference.networking.k8s.io"):
        kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")
    kubectl("create", "namespace", ns)
    yield ns
    kubectl("delete", "namespace", ns, "--wait=false", check=False)


@pytest.fixture(scope="module")
def operator(namespace, tmp_path_factory):
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    args = [sys.executable, "-m", "kubellm.operator", "--namespace", namespace,
            "--resync-seconds", "2", "--liveness-port", "0", "--log-format", "plain",
            "--default-image", IMAGE or "kubellm:test", "--controllers", "reconciler"]
    if OPERATOR_IMAGE:
        args += ["--activator-image", OPERATOR_IMAGE]
    proc = subprocess.Popen(args, stdout=log.open("a"), stderr=subprocess.STDOUT)
    yield proc
    proc.terminate()
    proc.wait(timeout=20)


def _condition(name: str, ns: str, type_: str) -> dict:
    status = (get("llmd", name, ns) or {}).get("status") or {}
    return next((c for c in status.get("conditions", []) if c["type"] == type_), {})


def test_routing_objects_pass_server_validation(namespace):
    """Server: the InferencePool (the project's CRD and its CEL rules), the picker's RBAC
    (the server's escalation check: the operator holds what it grants is a chart test),
    Deployment and Service, as built (dry run, strict field validation)."""
    from kubellm.operator.builders.children import build_children
    from kubellm.operator.validation import defaulted_spec

    spec = defaulted_spec({"model": {"source": {"huggingFace": "org/m"}},
                           "routing": {"enabled": True}})
    cr = {"apiVersion": "kubellm.io/v1alpha1", "kind": "LLMDeployment",
          "metadata": {"name": "pool", "namespace": namespace, "uid": "u"}, "spec": spec}
    for obj in build_children(cr, spec, image="img", lws_available=False, pool_available=True):
        obj["metadata"].pop("ownerReferences", None)  # the owner "u" does not exist
        kubectl("apply", "--dry-run=server", "--validate=strict", "-f", "-",
                stdin=json.dumps(obj))


def test_routing_creates_the_pool_and_reports_it(namespace, operator):
    ns = namespace
    kubectl("apply", "-f", "-", stdin=llmd("routed", ns, {
        "model": {"source": {"huggingFace": "org/m"}}, "routing": {"enabled": True}}))
    pool = wait_for(lambda: get("inferencepool", "routed", ns), what="InferencePool")
    assert pool["spec"]["endpointPickerRef"]["name"] == "routed-epp"
    for kind in ("deployment", "service", "configmap", "serviceaccount", "role",
                 "rolebinding"):
        wait_for(lambda: get(kind, "routed-epp", ns), what=f"{kind} routed-epp")
    status = wait_for(lambda: (get("llmd", "routed", ns) or {}).get("status", {})
                      .get("routing"), what="status.routing")
    assert status == {"inferencePool": "routed",
                      "endpointPicker": f"routed-epp.{ns}.svc:9002"}
    if os.environ.get("KUBELLM_TEST_GAIE"):  # every GAIE CRD installed, the EPP pullable
        wait_for(lambda: _condition("routed", ns, "Routing").get("status") == "True",
                 timeout=600, what="the Endpoint Picker ready")


@pytest.mark.skipif(not (IMAGE and OPERATOR_IMAGE),
                    reason="needs the runtime and the operator images in the cluster: set "
                           "KUBELLM_TEST_IMAGE and KUBELLM_TEST_OPERATOR_IMAGE")
def test_a_request_waits_for_the_first_replica(namespace, operator):
    """Scale from zero with the activator: a request sent at zero replicas is held, the
    test scales to one (as the autoscaler would on the held count) and the request is
    answered by the replica; the Service went back to the replica; coldStart is set."""
    ns = namespace
    example = yaml.safe_load((ROOT / "examples" / "cpu-default-model.yaml").read_text())
    example["metadata"].update(namespace=ns, name="cold")
    example["spec"].update(image=IMAGE, imagePullPolicy="IfNotPresent", replicas=0,
                           autoscaling={"enabled": True, "minReplicas": 0, "maxReplicas": 1})
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump(example))
    wait_for(lambda: (d := get("deployment", "cold-activator", ns))
             and (d.get("status") or {}).get("readyReplicas") == 1, timeout=600,
             what="the activator ready")
    body = json.dumps({"model": "smollm2", "max_tokens": 8, "temperature": 0,
                       "messages": [{"role": "user", "content": "Capital of France?"}]})
    script = ("import urllib.request, sys; r = urllib.request.Request("
              f"'http://cold.{ns}.svc:8000/v1/chat/completions', data=sys.argv[1].encode(), "
              "headers={'Content-Type': 'application/json'}); "
              "print(urllib.request.urlopen(r, timeout=1200).read().decode())")
    client = subprocess.Popen(
        [str(ROOT / ".tools" / "kubectl"), "run", "client", "-n", ns, "--rm", "-i",
         "--restart=Never", f"--image={IMAGE}", "--image-pull-policy=IfNotPresent",
         "--command", "--", "python3", "-c", script, body],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(20)  # the request reaches the activator and waits there
    assert client.poll() is None, client.communicate()
    kubectl("scale", "llmd/cold", "-n", ns, "--replicas", "1")
    out, err = client.communicate(timeout=1500)
    assert client.returncode == 0 and "Paris" in out, (out, err)
    service = get("service", "cold", ns)
    assert service["spec"]["selector"]["kubellm.io/role"] == "leader"
    cold = (get("llmd", "cold", ns) or {}).get("status", {}).get("coldStart", {})
    assert cold.get("lastSeconds", -1) >= 0
