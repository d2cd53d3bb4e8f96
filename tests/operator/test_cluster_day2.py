"""Day 2 on a real cluster (KUBECONFIG): the emulated scenarios of test_operator_model_cache
and test_rollout_without_outage, replayed with a real API server, Job controller,
scheduler and kubelet. tests/k8s/README.md says what each needs; without it they skip.
"""
from __future__ import annotations

import json
import os
import time
import uuid

import pytest
import yaml

from .test_operator_cluster import ROOT, get, kubectl, llmd, wait_for
from .test_cluster_real_server import IMAGE, operator  # noqa: F401 (the fixture)

pytestmark = [
    pytest.mark.k8s,
    pytest.mark.skipif(not os.environ.get("KUBECONFIG"),
                       reason="needs a real cluster: set KUBECONFIG (tests/k8s/README.md)"),
]
NEEDS_IMAGE = pytest.mark.skipif(not IMAGE, reason="needs the runtime image in the cluster: "
                                                   "set KUBELLM_TEST_IMAGE")
NEEDS_HUB = pytest.mark.skipif(not os.environ.get("KUBELLM_TEST_HUB"),
                               reason="needs pods that reach huggingface.co and a default "
                                      "StorageClass: set KUBELLM_TEST_HUB=1")
SMALL_HUB_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"


@pytest.fixture(scope="module")
def namespace():
    ns = f"kubellm-day2-{uuid.uuid4().hex[:6]}"
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
    kubectl("wait", "--for=condition=Established", "crd/llmdeployments.kubellm.io",
            "--timeout=60s")
    kubectl("create", "namespace", ns)
    yield ns
    kubectl("delete", "namespace", ns, "--wait=false", check=False)


def _status(name: str, ns: str) -> dict:
    return (get("llmd", name, ns) or {}).get("status") or {}


def _condition(name: str, ns: str, type_: str) -> dict:
    return next((c for c in _status(name, ns).get("conditions", []) if c["type"] == type_), {})


def test_day2_objects_pass_server_validation(namespace):
    """Server: the claim, loader Job, PodDisruptionBudget and a pod template with every
    scheduling field, as the operator builds them (dry run, strict field validation)."""
    from kubellm.operator.builders import model_cache as mc
    from kubellm.operator.builders.children import build_children
    from kubellm.operator.validation import defaulted_spec
    from .test_day2_builders import SCHEDULING

    spec = defaulted_spec({"model": {"source": {"huggingFace": SMALL_HUB_MODEL},
                                     "cache": {}}, "replicas": 2,
                           **{k: v for k, v in SCHEDULING.items()
                              if k not in ("priorityClassName", "runtimeClassName")}})
    cr = {"apiVersion": "kubellm.io/v1alpha1", "kind": "LLMDeployment",
          "metadata": {"name": "d2", "namespace": namespace, "uid": "u"}, "spec": spec}
    plan = mc.cache_plan(cr, spec)
    objects = build_children(cr, spec, image="img", lws_available=False) + [
        mc.build_cache_claim(cr, spec, plan), mc.build_loader_job(cr, spec, plan, "img", 1)]
    for obj in objects:
        obj["metadata"].pop("ownerReferences", None)  # the owner "u" does not exist
        kubectl("apply", "--dry-run=server", "--validate=strict", "-f", "-",
                stdin=json.dumps(obj))


@NEEDS_IMAGE
@NEEDS_HUB
def test_two_replicas_share_one_download(namespace, operator):  # noqa: F811
    ns = namespace
    spec = {"model": {"name": "smol", "source": {"huggingFace": SMALL_HUB_MODEL},
                      "cache": {"size": "2Gi"}},
            "replicas": 2, "resources": {"accelerator": "none"},
            "imagePullPolicy": "IfNotPresent", "image": IMAGE}
    kubectl("apply", "-f", "-", stdin=llmd("cached", ns, spec))
    wait_for(lambda: _condition("cached", ns, "ModelCached").get("status") == "True",
             timeout=900, what="ModelCached")
    wait_for(lambda: _status("cached", ns).get("readyReplicas") == 2, timeout=900,
             what="2 ready replicas")
    jobs = json.loads(kubectl("get", "jobs", "-n", ns, "-l",
                              "app.kubernetes.io/instance=cached", "-o", "json").stdout)
    assert len(jobs["items"]) == 1
    pods = json.loads(kubectl("get", "pods", "-n", ns, "-l",
                              "app.kubernetes.io/instance=cached,kubellm.io/role=leader",
                              "-o", "json").stdout)["items"]
    assert len(pods) == 2
    for pod in pods:
        claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"]
                  if "persistentVolumeClaim" in v]
        assert claims == ["cached-model-cache"]
    kubectl("delete", "llmd", "cached", "-n", ns, "--wait=true", "--timeout=120s")
    kept = get("pvc", "cached-model-cache", ns)  # whenDeleted: Retain (the default)
    assert kept is not None and not kept["metadata"].get("ownerReferences")


@NEEDS_IMAGE
def test_a_failed_loader_turns_degraded_with_its_reason(namespace, operator):  # noqa: F811
    ns = namespace
    spec = {"model": {"source": {"huggingFace": "kubellm-test/no-such-model"},
                      "cache": {"size": "1Gi"}},
            "resources": {"accelerator": "none"}, "image": IMAGE,
            "imagePullPolicy": "IfNotPresent"}
    kubectl("apply", "-f", "-", stdin=llmd("broken", ns, spec))
    degraded = wait_for(lambda: (c := _condition("broken", ns, "Degraded"))
                        .get("reason") == "ModelCacheFailed" and c, timeout=900,
                        what="ModelCacheFailed")
    assert "kubectl logs job/" in degraded["message"]
    assert get("deployment", "broken", ns) is None


@NEEDS_IMAGE
def test_a_rollout_keeps_a_ready_endpoint(namespace, operator):  # noqa: F811
    """The CPU example (one replica), rolled by a spec change: the Service never loses its
    last ready endpoint (polled every second from the EndpointSlices)."""
    ns = namespace
    example = yaml.safe_load((ROOT / "examples" / "cpu-default-model.yaml").read_text())
    example["metadata"].update(namespace=ns, name="rolling")
    example["spec"].update(imagePullPolicy="IfNotPresent", image=IMAGE)
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump(example))
    wait_for(lambda: _status("rolling", ns).get("phase") == "Ready", timeout=900,
             what="Ready")

    def ready_endpoints() -> int:
        slices = json.loads(kubectl("get", "endpointslices", "-n", ns, "-l",
                                    "kubernetes.io/service-name=rolling", "-o",
                                    "json").stdout)["items"]
        return sum(1 for s in slices for e in s.get("endpoints") or []
                   if (e.get("conditions") or {}).get("ready"))

    kubectl("patch", "llmd", "rolling", "-n", ns, "--type", "merge", "-p", json.dumps(
        {"spec": {"env": [{"name": "KUBELLM_ROLLOUT_TEST", "value": "2"}]}}))
    deadline, lowest, done = time.monotonic() + 900, None, False
    while time.monotonic() < deadline and not done:
        count = ready_endpoints()
        lowest = count if lowest is None else min(lowest, count)
        dep = get("deployment", "rolling", ns)
        env = dep["spec"]["template"]["spec"]["containers"][0].get("env", [])
        status = dep.get("status") or {}
        done = ({"name": "KUBELLM_ROLLOUT_TEST", "value": "2"} in env
                and status.get("updatedReplicas") == 1 and status.get("replicas") == 1
                and status.get("readyReplicas") == 1
                and status.get("observedGeneration") == dep["metadata"]["generation"])
        time.sleep(1)
    assert done, "the rollout did not finish"
    assert lowest >= 1
