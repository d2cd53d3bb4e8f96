"""Scale from zero: the policy with held requests and the idle window, the samples that
carry them, and the keda-mode objects (KEDA's CRD; the HTTP add-on's documented fields)."""
import pytest

from kubellm.operator.autoscaling.config import AutoscalingSpec
from kubellm.operator.autoscaling.history import MetricHistory, Sample
from kubellm.operator.autoscaling.http_addon import (SKIP_SCALED_OBJECT,
                                                     build_http_scaled_object)
from kubellm.operator.autoscaling.keda import build_scaled_object
from kubellm.operator.autoscaling.metrics import PodLoad, to_sample
from kubellm.operator.autoscaling.policy import decide

from .test_keda import validate

SPEC = AutoscalingSpec(enabled=True, min_replicas=0, max_replicas=4, target_queue_depth=8,
                       metrics_window_seconds=60, scrape_interval_seconds=15,
                       scale_down_stabilization_seconds=300,
                       scale_to_zero_after_seconds=600)


def sample(t, waiting=0.0, running=0.0, ready=1, held=None):
    return Sample(t, waiting, running, ready, ready, ready, None, held)


def history(*samples):
    h = MetricHistory()
    for s in samples:
        h = h.record(s, SPEC)
    return h


def test_a_held_request_at_zero_replicas_asks_for_one():
    d = decide(history(sample(0, ready=0, held=1)), SPEC, 0, None, 0)
    assert (d.replicas, d.reason) == (1, "ScaledUp")
    d = decide(history(sample(0, ready=0, held=20)), SPEC, 0, None, 0)
    assert d.replicas == 3  # ceil(20 / 8)


def test_zero_replicas_and_nothing_held_stays_at_zero():
    d = decide(history(sample(0, ready=0, held=0)), SPEC, 0, None, 0)
    assert (d.replicas, d.reason) == (0, "WithinTarget")
    # The activator silent and no pod: nothing known, nothing done.
    d = decide(history(sample(0, ready=0)), SPEC, 0, None, 0)
    assert (d.replicas, d.reason) == (0, "MetricsUnavailable")


def test_the_last_replica_goes_only_after_the_idle_window():
    def until(now):
        return history(*[sample(t, running=2) for t in range(0, 301, 15)],
                       *[sample(t) for t in range(315, now + 1, 15)])
    # 300 s of down-stabilization have passed, but not 600 s of idleness.
    d = decide(until(705), SPEC, 1, None, 705)
    assert (d.replicas, d.reason) == (1, "ScaleToZeroPending")
    assert "no demand for 405s" in d.message
    d = decide(until(900), SPEC, 1, None, 900)
    assert (d.replicas, d.reason) == (0, "ScaledDown")


def test_several_idle_replicas_go_to_one_first():
    h = history(*[sample(t, running=9, ready=3) for t in range(0, 301, 15)],
                *[sample(t, ready=3) for t in range(315, 700, 15)])
    d = decide(h, SPEC, 3, None, 690)
    assert d.replicas == 1


def test_unknown_samples_are_not_idle():
    h = history(*[sample(t) for t in range(0, 601, 15)],
                *[Sample(t, 0, 0, 0, 1, 1) for t in range(615, 1300, 15)])
    assert decide(h, SPEC, 1, None, 1290).replicas == 1


def test_samples_carry_what_the_activator_holds_and_round_trip():
    s = to_sample([PodLoad(1, 2)], 5.0, 1, held=3.0)
    assert s.fleet_waiting == 4.0 and s.held == 3.0
    assert Sample.from_json(s.to_json()) == s
    old_row = [1.0, 2.0, 0.0, 1, 1, 1, None]  # written before scale from zero
    assert Sample.from_json(old_row).held is None


KEDA_ZERO = {"model": {"source": {"huggingFace": "tiny"}}, "replicas": 0,
             "autoscaling": {"enabled": True, "mode": "keda", "minReplicas": 0,
                             "maxReplicas": 5, "scaleToZeroAfterSeconds": 900}}


def test_keda_from_zero_behind_the_pool_wakes_on_the_pickers_queue():
    obj = build_scaled_object("llm", "ns", KEDA_ZERO | {"routing": {"enabled": True}}, "u")
    validate(obj)
    spec = obj["spec"]
    assert spec["minReplicaCount"] == 0 and spec["cooldownPeriod"] == 900
    queue, epp = spec["triggers"]
    assert queue["metadata"]["ignoreNullValues"] == "true"  # no pods, no series
    assert epp["metadata"]["query"] == ('sum(inference_extension_flow_control_queue_size'
                                        '{namespace="ns",service="llm-epp"})')
    assert epp["metadata"]["activationThreshold"] == "0"


def test_keda_from_zero_without_routing_uses_the_http_add_on(monkeypatch):
    monkeypatch.setenv("KUBELLM_KEDA_HTTP_SCALER", "scaler.keda-system:9090")
    obj = build_scaled_object("llm", "ns", KEDA_ZERO, "u")
    validate(obj)
    push = obj["spec"]["triggers"][-1]
    assert push == {"type": "external-push", "name": "http-add-on",
                    "metadata": {"scalerAddress": "scaler.keda-system:9090",
                                 "httpScaledObject": "llm"}}
    http = build_http_scaled_object("llm", "ns", KEDA_ZERO, "u")
    # One owner of the ScaledObject: the add-on is told not to make its own.
    assert http["metadata"]["annotations"] == {SKIP_SCALED_OBJECT: "true"}
    spec = http["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "kubellm.io/v1alpha1",
                                      "kind": "LLMDeployment", "name": "llm",
                                      "service": "llm", "port": 8000}
    assert "llm.ns.svc" in spec["hosts"]
    assert spec["replicas"] == {"min": 0, "max": 5} and spec["scaledownPeriod"] == 900
    # Far above the add-on's defaults (20 s, 500 ms): an LLM loads for minutes.
    assert spec["timeouts"] == {"conditionWait": "1800s", "responseHeader": "3600s"}
    assert set(spec["scalingMetric"]) == {"concurrency"}


def test_keda_with_replicas_never_gets_the_from_zero_triggers():
    spec = KEDA_ZERO | {"autoscaling": KEDA_ZERO["autoscaling"] | {"minReplicas": 1},
                        "replicas": 1}
    [queue] = build_scaled_object("llm", "ns", spec, "u")["spec"]["triggers"]
    assert queue["metadata"]["ignoreNullValues"] == "false"


@pytest.mark.parametrize("min_replicas", [0, 1])
def test_min_replicas_zero_is_valid_in_both_modes(min_replicas):
    spec = AutoscalingSpec.from_spec({"autoscaling": {"enabled": True,
                                                      "minReplicas": min_replicas}})
    assert spec.scales_to_zero is (min_replicas == 0)
