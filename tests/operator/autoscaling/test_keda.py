"""keda mode: the ScaledObject builder checked against KEDA's real ScaledObject CRD and the
HorizontalPodAutoscaler validation KEDA hands its behavior to."""
import pytest

from kubellm.operator.autoscaling.config import InvalidAutoscalingSpec
from kubellm.operator.autoscaling.keda import build_scaled_object
from tests.thirdparty_crds import crd_errors

SPEC = {"model": {"source": {"huggingFace": "tiny"}}, "replicas": 2,
        "autoscaling": {"enabled": True, "mode": "keda", "minReplicas": 2, "maxReplicas": 9,
                        "targetQueueDepth": 4.5, "metricsWindowSeconds": 30,
                        "scrapeIntervalSeconds": 10, "scaleUpStabilizationSeconds": 20,
                        "scaleDownStabilizationSeconds": 600, "maxScaleUpStep": 3}}


def hpa_behavior_errors(behavior):
    """What the API server's autoscaling/v2 validation refuses in HPAScalingRules (KEDA
    creates an HPA from advanced.horizontalPodAutoscalerConfig.behavior)."""
    errors = []
    for direction, rules in behavior.items():
        window = rules.get("stabilizationWindowSeconds", 0)
        if not 0 <= window <= 3600:
            errors.append(f"{direction}.stabilizationWindowSeconds: must be in [0, 3600]")
        for policy in rules.get("policies", []):
            if policy["value"] <= 0 or not 0 < policy["periodSeconds"] <= 1800:
                errors.append(f"{direction}.policies: value > 0, periodSeconds in (0, 1800]")
    return errors


def errors_of(obj):
    behavior = obj["spec"].get("advanced", {}).get("horizontalPodAutoscalerConfig", {}) \
        .get("behavior", {})
    return crd_errors(obj) + hpa_behavior_errors(behavior)


def validate(obj):
    assert errors_of(obj) == []


def test_scaled_object_matches_kedas_schema_and_the_spec():
    obj = build_scaled_object("llm", "team-a", SPEC, "uid-1",
                              server_address="http://prom.monitoring:9090")
    validate(obj)
    spec = obj["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "kubellm.io/v1alpha1",
                                      "kind": "LLMDeployment", "name": "llm"}
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (2, 9)
    assert spec["pollingInterval"] == 10 and spec["cooldownPeriod"] == 600
    behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleUp"]["stabilizationWindowSeconds"] == 20
    assert behavior["scaleUp"]["policies"] == [{"type": "Pods", "value": 3, "periodSeconds": 10}]
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] == 600
    [trigger] = spec["triggers"]
    assert trigger["type"] == "prometheus" and trigger["metricType"] == "AverageValue"
    meta = trigger["metadata"]
    assert meta["serverAddress"] == "http://prom.monitoring:9090"
    assert meta["threshold"] == "4.5"
    assert meta["query"] == ('sum(avg_over_time(vllm:num_requests_waiting'
                             '{namespace="team-a",service="llm"}[30s]))')
    assert obj["metadata"]["ownerReferences"] == [{
        "apiVersion": "kubellm.io/v1alpha1", "kind": "LLMDeployment", "name": "llm",
        "uid": "uid-1", "controller": True, "blockOwnerDeletion": True}]


def test_running_trigger_when_the_batch_size_is_known(monkeypatch):
    monkeypatch.setenv("KUBELLM_PROMETHEUS_ADDRESS", "http://from-env:9090")
    obj = build_scaled_object("llm", "ns", SPEC | {"engine": {"maxNumSeqs": 64}}, "u")
    validate(obj)
    queue, running = obj["spec"]["triggers"]
    assert queue["metadata"]["serverAddress"] == "http://from-env:9090"
    assert "vllm:num_requests_running" in running["metadata"]["query"]
    assert running["metadata"]["threshold"] == "64"


def test_schema_check_can_fail():
    obj = build_scaled_object("llm", "ns", SPEC, "u")
    obj["spec"]["triggers"][0]["metadata"]["threshold"] = 4.5        # must be a string
    assert any("threshold" in e for e in errors_of(obj))
    obj = build_scaled_object("llm", "ns", SPEC, "u")
    obj["spec"]["minReplicas"] = 2                                   # pruned by the CRD
    assert any("minReplicas" in e for e in errors_of(obj))
    obj = build_scaled_object("llm", "ns", SPEC, "u")
    obj["spec"]["minReplicaCount"], obj["spec"]["maxReplicaCount"] = 5, 3   # KEDA's CEL rule
    assert any("Invalid value" in e for e in errors_of(obj)), errors_of(obj)
    obj = build_scaled_object("llm", "ns", SPEC, "u")
    obj["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"][
        "stabilizationWindowSeconds"] = 7200                         # HPA allows <= 3600
    assert any("3600" in e for e in errors_of(obj))


def test_bad_spec_is_named():
    bad = {"autoscaling": {"enabled": True, "mode": "keda", "minReplicas": 3, "maxReplicas": 2}}
    with pytest.raises(InvalidAutoscalingSpec, match=r"spec\.autoscaling\.maxReplicas"):
        build_scaled_object("llm", "ns", bad, "u")


def test_windows_beyond_the_hpa_limit_are_named():
    spec = {"autoscaling": SPEC["autoscaling"] | {"scaleDownStabilizationSeconds": 7200}}
    with pytest.raises(InvalidAutoscalingSpec,
                       match=r"spec\.autoscaling\.scaleDownStabilizationSeconds must be <= 3600"):
        build_scaled_object("llm", "ns", spec, "u")
