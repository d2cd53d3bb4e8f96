"""The operator against a real cluster (KUBECONFIG), driven with kubectl like a user.

Applies the CRD from crds/, runs the operator process watching a fresh namespace, and
replays the emulated scenarios; also checks that the API server itself rejects bad
manifests with messages that name the field. No GPUs are needed: pods may stay Pending.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from tests.helm.tools import binary

pytestmark = [
    pytest.mark.k8s,
    pytest.mark.skipif(not os.environ.get("KUBECONFIG"),
                       reason="needs a real cluster: set KUBECONFIG"),
]

from tests.paths import ROOT
HF_SPEC = {"model": {"source": {"huggingFace": "Qwen/Qwen2.5-0.5B-Instruct"}},
           "parallelism": {"tensor": 1}}


def kubectl(*args: str, stdin: str | None = None, check: bool = True):
    result = subprocess.run([str(binary("kubectl")), *args], input=stdin,
                            capture_output=True, text=True, timeout=60)
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)}: {result.stderr}")
    return result


def get(kind: str, name: str, ns: str) -> dict | None:
    result = kubectl("get", kind, name, "-n", ns, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def wait_for(check, timeout: float = 60.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what}")


def llmd(name: str, ns: str, spec: dict) -> str:
    return yaml.safe_dump({"apiVersion": "kubellm.io/v1alpha1", "kind": "LLMDeployment",
                           "metadata": {"name": name, "namespace": ns}, "spec": spec})


@pytest.fixture(scope="module")
def namespace():
    kubectl("apply", "--server-side", "-f", str(ROOT / "crds" / "llmdeployment.yaml"))
    kubectl("wait", "--for=condition=Established", "crd/llmdeployments.kubellm.io",
            "--timeout=60s")
    ns = f"kubellm-test-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", ns)
    yield ns
    kubectl("delete", "namespace", ns, "--wait=false", check=False)


def start_operator(ns: str, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "kubellm.operator", "--namespace", ns,
         "--resync-seconds", "2", "--liveness-port", "0", "--log-format", "plain",
         "--default-image", "kubellm:test"],
        stdout=log.open("a"), stderr=subprocess.STDOUT)


@pytest.fixture(scope="module")
def operator(namespace, tmp_path_factory):
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    proc = start_operator(namespace, log)
    yield proc
    proc.terminate()
    proc.wait(timeout=20)


@pytest.mark.parametrize("spec, field", [
    ({**HF_SPEC, "parallelism": {"tensor": 0}}, "spec.parallelism.tensor"),
    ({**HF_SPEC, "parallelism": {"pipeline": 0}}, "spec.parallelism.pipeline"),
    ({**HF_SPEC, "autoscaling": {"minReplicas": 3, "maxReplicas": 2}},
     "spec.autoscaling.minReplicas"),
    ({**HF_SPEC, "replicas": 9, "autoscaling": {"enabled": True, "maxReplicas": 2}},
     "spec.replicas"),
    ({"model": {"source": {"huggingFace": "a", "pvc": {"claimName": "c"}}}},
     "spec.model.source"),
    ({**HF_SPEC, "engine": {"schedulingPolicy": "lifo"}}, "spec.engine.schedulingPolicy"),
])
def test_api_server_rejects_bad_manifests_naming_the_field(namespace, spec, field):
    result = kubectl("apply", "-f", "-", stdin=llmd("bad", namespace, spec), check=False)
    assert result.returncode != 0
    assert field in result.stderr


def test_lifecycle_against_the_cluster(namespace, operator):
    ns = namespace
    kubectl("apply", "-f", "-", stdin=llmd("chat", ns, HF_SPEC))
    cr = get("llmd", "chat", ns)
    dep = wait_for(lambda: get("deployment", "chat", ns), what="Deployment")
    svc = wait_for(lambda: get("service", "chat", ns), what="Service")
    for child in (dep, svc):
        assert child["metadata"]["ownerReferences"][0]["uid"] == cr["metadata"]["uid"]
    status = wait_for(lambda: (get("llmd", "chat", ns) or {}).get("status", {}).get("endpoint")
                      and get("llmd", "chat", ns)["status"], what="status")
    assert status["endpoint"] == f"http://chat.{ns}.svc:8000/v1"

    # Edit: model and engine knobs reach the pod template.
    kubectl("patch", "llmd", "chat", "-n", ns, "--type", "merge", "-p", json.dumps(
        {"spec": {"model": {"source": {"huggingFace": "Qwen/Qwen3-0.6B"}},
                  "engine": {"maxNumSeqs": 16}}}))
    wait_for(lambda: "Qwen/Qwen3-0.6B" in get("deployment", "chat", ns)["spec"]["template"]
             ["spec"]["containers"][0]["args"], what="new model in args")

    # kubectl scale goes through the scale subresource.
    kubectl("scale", "llmd/chat", "-n", ns, "--replicas", "2")
    wait_for(lambda: get("deployment", "chat", ns)["spec"]["replicas"] == 2,
             what="replicas 2")

    # Drift: a deleted child comes back.
    uid = get("deployment", "chat", ns)["metadata"]["uid"]
    kubectl("delete", "deployment", "chat", "-n", ns, "--wait=true")
    wait_for(lambda: (d := get("deployment", "chat", ns)) and d["metadata"]["uid"] != uid,
             what="recreated Deployment")


def test_invalid_spec_sets_degraded_and_an_event(namespace, operator):
    ns = namespace
    spec = {**HF_SPEC, "parallelism": {"tensor": 16, "gpusPerNode": 8}}
    kubectl("apply", "-f", "-", stdin=llmd("huge", ns, spec))
    status = wait_for(lambda: (get("llmd", "huge", ns) or {}).get("status", {})
                      .get("phase") == "Degraded" and get("llmd", "huge", ns)["status"],
                      what="Degraded")
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert "spec.parallelism.tensor" in degraded["message"]
    events = json.loads(kubectl("get", "events", "-n", ns, "-o", "json",
                                "--field-selector", "involvedObject.name=huge").stdout)
    assert any(e["reason"] == "InvalidSpec" for e in events["items"])


def test_restart_and_delete(namespace, operator, tmp_path):
    ns = namespace
    kubectl("apply", "-f", "-", stdin=llmd("again", ns, HF_SPEC))
    dep = wait_for(lambda: get("deployment", "again", ns), what="Deployment")
    operator.terminate()
    operator.wait(timeout=20)
    second = start_operator(ns, tmp_path / "second.log")
    try:
        time.sleep(6)  # resume + a few resync passes
        after = get("deployment", "again", ns)
        assert after["metadata"]["uid"] == dep["metadata"]["uid"]  # not re-created
        kubectl("delete", "llmd", "again", "-n", ns, "--wait=true", "--timeout=60s")
        wait_for(lambda: get("deployment", "again", ns) is None, what="children deleted")
    finally:
        second.terminate()
        second.wait(timeout=20)
