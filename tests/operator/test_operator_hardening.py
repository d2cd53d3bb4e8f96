"""Runtime pods as a cluster administrator wants them: no API token, never BestEffort,
an optional NetworkPolicy whose verdicts are evaluated, secrets only by reference."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kubellm.operator.builders.children import build_children
from kubellm.operator.builders.network_policy import NetworkPolicyDefaults
from kubellm.operator.builders.sizing import parse_parameters
from kubellm.operator.validation import defaulted_spec

from .netpol import Pod, allows

from tests.paths import ROOT
NS = "team-a"
HF = {"source": {"huggingFace": "Qwen/Qwen2.5-0.5B-Instruct"}}
OPERATOR = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name":
                                                  "kubellm-system"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "kubellm-operator"}}}


def build(spec: dict, *, lws: bool = False, defaults=NetworkPolicyDefaults()) -> list[dict]:
    cr = {"apiVersion": "kubellm.io/v1alpha1", "kind": "LLMDeployment",
          "metadata": {"name": "m", "namespace": NS, "uid": "uid-1"}, "spec": spec}
    return build_children(cr, defaulted_spec(spec), image="img", lws_available=lws,
                          network_policy=defaults)


def pod_templates(children: list[dict]) -> list[dict]:
    templates = []
    for child in children:
        spec = child.get("spec", {})
        if "template" in spec:
            templates.append(spec["template"])
        for key in ("leaderTemplate", "workerTemplate"):
            if key in spec.get("leaderWorkerTemplate", {}):
                templates.append(spec["leaderWorkerTemplate"][key])
    return templates


def qos_class(pod: dict) -> str:
    """The kubelet's QoS class of a pod spec (core/v1 PodQOSClass rules)."""
    compute = ("cpu", "memory")
    containers = pod["containers"]
    requests = [c.get("resources", {}).get("requests", {}) for c in containers]
    limits = [c.get("resources", {}).get("limits", {}) for c in containers]
    if not any(k in r for r in requests + limits for k in compute):
        return "BestEffort"
    guaranteed = all(all(k in lim and r.get(k, lim[k]) == lim[k] for k in compute)
                     for r, lim in zip(requests, limits))
    return "Guaranteed" if guaranteed else "Burstable"


def examples() -> list[Path]:
    return sorted((ROOT / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", examples(), ids=lambda p: p.name)
@pytest.mark.parametrize("lws", [False, True])
def test_example_pods_have_no_token_and_are_not_best_effort(path, lws):
    example = yaml.safe_load(path.read_text())
    spec = example["spec"]
    for template in pod_templates(build(spec, lws=lws)):
        pod = template["spec"]
        assert pod["automountServiceAccountToken"] is False
        assert qos_class(pod) != "BestEffort"


def test_gpu_only_resources_get_requests_sized_from_model_and_layout():
    [small] = pod_templates(build({"model": HF}))
    res = small["spec"]["containers"][0]["resources"]
    assert res["limits"] == {"nvidia.com/gpu": "1"}
    # 0.5B in bf16 is 0.93 GiB of weights: base 4 + that, rounded up; 2 + 1 CPU; plus the
    # 2 GiB /dev/shm of one rank, which counts as the pod's memory; and the disk the
    # weights are downloaded to.
    assert res["requests"] == {"cpu": "3", "memory": "7Gi", "ephemeral-storage": "2Gi"}

    big = {"model": {"source": {"huggingFace": "meta-llama/Llama-3.1-70B-Instruct"}},
           "parallelism": {"tensor": 8, "pipeline": 2}}
    for template in pod_templates(build(big)):
        requests = template["spec"]["containers"][0]["resources"]["requests"]
        # 8 ranks per pod: 4 + 2 x 7 + a 5 GiB shard + 9 GiB /dev/shm; 2 + 8 CPU; 70B of
        # bf16 weights on disk (131 GiB, rounded up) + 1 GiB.
        assert requests == {"cpu": "10", "memory": "32Gi", "ephemeral-storage": "132Gi"}

    given = pod_templates(build({"model": HF, "resources": {"memory": "32Gi"}}))[0]
    res = given["spec"]["containers"][0]["resources"]
    assert res["limits"]["memory"] == res["requests"]["memory"] == "34Gi"  # + 2Gi shm
    assert res["requests"]["cpu"] == "3"  # the one the user left out is still sized


@pytest.mark.parametrize("text, count", [
    ("Qwen2.5-0.5B-Instruct", 0.5e9), ("Llama-3.1-70B", 70e9), ("SmolLM2-135M", 135e6),
    ("Mixtral-8x7B-v0.1", 56e9), ("Qwen3-30B-A3B", 30e9), ("gpt2", None),
    ("model-v2", None), ("8B", 8e9)])
def test_parameter_counts_from_names(text, count):
    assert parse_parameters(text) == count


def test_stated_parameters_win_over_the_name():
    spec = {"model": {"source": {"huggingFace": "org/mystery"}, "parameters": "70B"}}
    requests = pod_templates(build(spec))[0]["spec"]["containers"][0]["resources"]["requests"]
    assert requests["memory"] == "11Gi"  # 4 + a full 5 GiB shard + 2 GiB shm


def _policy(children: list[dict]) -> list[dict]:
    return [c for c in children if c["kind"] == "NetworkPolicy"]


def test_network_policy_is_opt_in_per_deployment_or_by_operator_default():
    assert _policy(build({"model": HF})) == []
    assert len(_policy(build({"model": HF, "networkPolicy": {"enabled": True}}))) == 1
    on = NetworkPolicyDefaults(enabled=True)
    assert len(_policy(build({"model": HF}, defaults=on))) == 1
    assert _policy(build({"model": HF, "networkPolicy": {"enabled": False}},
                         defaults=on)) == []


def _runtime_pod(children: list[dict]) -> Pod:
    template = pod_templates(children)[0]
    ports = {p["name"]: p["containerPort"] for p in template["spec"]["containers"][0]["ports"]}
    return Pod(NS, template["metadata"]["labels"], ports=ports)


def test_network_policy_admits_the_namespace_and_scrapers_only():
    children = build({"model": HF, "networkPolicy": {
        "enabled": True, "metricsFrom": [{"namespaceSelector": {"matchLabels": {
            "kubernetes.io/metadata.name": "monitoring"}}}]}},
        defaults=NetworkPolicyDefaults(scrapers=[OPERATOR]))
    policies, target = _policy(children), _runtime_pod(children)
    neighbour = Pod(NS, {"app": "chat-ui"})
    assert allows(policies, neighbour, target, 8000)
    assert not allows(policies, neighbour, target, 29500)  # only the API port
    assert not allows(policies, Pod("team-b", {"app": "chat-ui"}), target, 8000)
    operator = Pod("kubellm-system", {"app.kubernetes.io/name": "kubellm-operator"})
    assert allows(policies, operator, target, 8000)
    assert not allows(policies, Pod("kubellm-system", {"app": "other"}), target, 8000)
    assert allows(policies, Pod("monitoring", {"app": "prometheus"}), target, 8000)
    # The evaluator itself: without the policy everything is admitted.
    assert allows([], Pod("team-b"), target, 29500)


def test_named_clients_replace_the_namespace_default():
    children = build({"model": HF, "networkPolicy": {"enabled": True, "from": [
        {"namespaceSelector": {"matchLabels": {"team": "apps"}},
         "podSelector": {"matchLabels": {"role": "gateway"}}}]}})
    policies, target = _policy(children), _runtime_pod(children)
    gateway = Pod("edge", {"role": "gateway"}, namespace_labels={"team": "apps"})
    assert allows(policies, gateway, target, 8000)
    assert not allows(policies, Pod("edge", {"role": "batch"}, namespace_labels={
        "team": "apps"}), target, 8000)
    assert not allows(policies, Pod(NS, {"app": "chat-ui"}), target, 8000)


@pytest.mark.parametrize("lws", [False, True])
def test_ranks_of_a_multi_node_replica_reach_each_other(lws):
    children = build({"model": HF, "parallelism": {"tensor": 8, "pipeline": 2},
                      "networkPolicy": {"enabled": True}}, lws=lws)
    policies = _policy(children)
    ranks = [Pod(NS, t["metadata"]["labels"]) for t in pod_templates(children)]
    for source in ranks:
        for target in ranks:
            assert allows(policies, source, target, 29500)
            assert allows(policies, source, target, 43117)  # an NCCL socket port
    assert not allows(policies, Pod(NS, {"app": "chat-ui"}), ranks[0], 29500)


def test_api_key_is_only_referenced_never_inlined():
    spec = {"model": HF, "apiKeySecretRef": {"name": "llm-key", "key": "token"},
            "env": [{"name": "OTHER", "value": "x"}]}
    for template in pod_templates(build(spec)):
        container = template["spec"]["containers"][0]
        env = {e["name"]: e for e in container["env"]}
        assert env["KUBELLM_API_KEY"] == {"name": "KUBELLM_API_KEY", "valueFrom": {
            "secretKeyRef": {"name": "llm-key", "key": "token"}}}
        assert not any("api-key" in a for a in container["args"])
