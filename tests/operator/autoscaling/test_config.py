"""spec.autoscaling parsing: CRD defaults, and bad values named in the error."""
import pytest

from kubellm.operator.autoscaling.config import AutoscalingSpec, InvalidAutoscalingSpec


def test_defaults_match_the_crd():
    spec = AutoscalingSpec.from_spec({})
    assert spec == AutoscalingSpec(enabled=False, mode="operator", min_replicas=1,
                                   max_replicas=1, target_queue_depth=8,
                                   metrics_window_seconds=60, scrape_interval_seconds=15,
                                   scale_up_stabilization_seconds=0,
                                   scale_down_stabilization_seconds=300, max_scale_up_step=4)


def test_camel_case_fields_are_read():
    spec = AutoscalingSpec.from_spec({"autoscaling": {
        "enabled": True, "mode": "keda", "minReplicas": 2, "maxReplicas": 9,
        "targetQueueDepth": 4.5, "metricsWindowSeconds": 30, "scrapeIntervalSeconds": 5,
        "scaleUpStabilizationSeconds": 10, "scaleDownStabilizationSeconds": 120,
        "maxScaleUpStep": 2}})
    assert (spec.enabled, spec.mode, spec.min_replicas, spec.max_replicas) == \
        (True, "keda", 2, 9)
    assert spec.target_queue_depth == 4.5 and spec.max_scale_up_step == 2
    assert spec.scale_down_stabilization_seconds == 120.0


@pytest.mark.parametrize("fields,named", [
    ({"minReplicas": -1}, "spec.autoscaling.minReplicas"),
    ({"minReplicas": 0, "maxReplicas": 0}, "spec.autoscaling.maxReplicas"),
    ({"scaleToZeroAfterSeconds": 0}, "spec.autoscaling.scaleToZeroAfterSeconds"),
    ({"minReplicas": 5, "maxReplicas": 2}, "spec.autoscaling.maxReplicas"),
    ({"targetQueueDepth": 0}, "spec.autoscaling.targetQueueDepth"),
    ({"targetQueueDepth": "8"}, "spec.autoscaling.targetQueueDepth"),
    ({"minReplicas": True}, "spec.autoscaling.minReplicas"),
    ({"maxReplicas": 2.5}, "spec.autoscaling.maxReplicas"),
    ({"mode": "hpa"}, "spec.autoscaling.mode"),
    ({"metricsWindowSeconds": 0}, "spec.autoscaling.metricsWindowSeconds"),
    ({"scrapeIntervalSeconds": -1}, "spec.autoscaling.scrapeIntervalSeconds"),
    ({"scaleDownStabilizationSeconds": -5}, "spec.autoscaling.scaleDownStabilizationSeconds"),
    ({"maxScaleUpStep": 0}, "spec.autoscaling.maxScaleUpStep"),
    ({"enabled": "yes"}, "spec.autoscaling.enabled"),
])
def test_bad_values_name_the_field(fields, named):
    with pytest.raises(InvalidAutoscalingSpec, match=named.replace(".", r"\.")):
        AutoscalingSpec.from_spec({"autoscaling": fields})


def test_autoscaling_must_be_an_object():
    with pytest.raises(InvalidAutoscalingSpec, match="spec.autoscaling must be an object"):
        AutoscalingSpec.from_spec({"autoscaling": [1]})
