"""keda mode: the ScaledObject builder checked against KEDA's ScaledObject schema."""
import json
import pathlib

import jsonschema
import pytest

from kubellm.operator.autoscaling.config import InvalidAutoscalingSpec
from kubellm.operator.autoscaling.keda import build_scaled_object

SCHEMA = json.loads((pathlib.Path(__file__).parent / "keda_scaledobject.schema.json").read_text())
SPEC = {"model": {"source": {"huggingFace": "tiny"}}, "replicas": 2,
        "autoscaling": {"enabled": True, "mode": "keda", "minReplicas": 2, "maxReplicas": 9,
                        "targetQueueDepth": 4.5, "metricsWindowSeconds": 30,
                        "scrapeIntervalSeconds": 10, "scaleUpStabilizationSeconds": 20,
                        "scaleDownStabilizationSeconds": 600, "maxScaleUpStep": 3}}


def closed(schema):
    """The schema with unknown fields forbidden everywhere a CRD would prune them: a
    misspelt field would be silently dropped by the API server, so it must fail here."""
    if isinstance(schema, dict):
        schema = {k: closed(v) for k, v in schema.items()}
        if "properties" in schema and "additionalProperties" not in schema:
            schema["additionalProperties"] = False
    elif isinstance(schema, list):
        schema = [closed(v) for v in schema]
    return schema


def validate(obj):
    jsonschema.Draft202012Validator(closed(SCHEMA),
                                    format_checker=jsonschema.FormatChecker()).validate(obj)


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
    with pytest.raises(jsonschema.ValidationError):
        validate(obj)
    obj = build_scaled_object("llm", "ns", SPEC, "u")
    obj["spec"]["minReplicas"] = 2                                   # pruned by the CRD
    with pytest.raises(jsonschema.ValidationError):
        validate(obj)
    obj = build_scaled_object("llm", "ns", SPEC, "u")
    obj["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"][
        "stabilizationWindowSeconds"] = 7200                         # HPA allows <= 3600
    with pytest.raises(jsonschema.ValidationError):
        validate(obj)


def test_bad_spec_is_named():
    bad = {"autoscaling": {"enabled": True, "mode": "keda", "minReplicas": 3, "maxReplicas": 2}}
    with pytest.raises(InvalidAutoscalingSpec, match=r"spec\.autoscaling\.maxReplicas"):
        build_scaled_object("llm", "ns", bad, "u")


def test_windows_beyond_the_hpa_limit_are_named():
    spec = {"autoscaling": SPEC["autoscaling"] | {"scaleDownStabilizationSeconds": 7200}}
    with pytest.raises(InvalidAutoscalingSpec,
                       match=r"spec\.autoscaling\.scaleDownStabilizationSeconds must be <= 3600"):
        build_scaled_object("llm", "ns", spec, "u")
