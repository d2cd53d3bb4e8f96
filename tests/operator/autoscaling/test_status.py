"""The status patch: ScalingActive merged into the shared conditions list."""
from kubellm.operator.autoscaling.history import MetricHistory
from kubellm.operator.autoscaling.policy import Decision
from kubellm.operator.autoscaling.status import (condition_patch, decision_patch,
                                                 parse_time, rebased, rfc3339,
                                                 with_condition)

READY = {"type": "Ready", "status": "True", "reason": "AllReplicasReady",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}


def test_other_conditions_are_kept_and_transition_time_moves_only_on_a_flip():
    first = with_condition([READY], "ScaledUp", "up", now=1000)
    assert first[0] == READY and first[1]["status"] == "True"
    assert first[1]["lastTransitionTime"] == rfc3339(1000)
    same = with_condition(first, "WithinTarget", "hold", now=2000)
    assert same[1]["reason"] == "WithinTarget"
    assert same[1]["lastTransitionTime"] == rfc3339(1000)      # still True since 1000
    flipped = with_condition(same, "MetricsUnavailable", "no pods", now=3000)
    assert flipped[1]["status"] == "False"
    assert flipped[1]["lastTransitionTime"] == rfc3339(3000)
    assert [c["type"] for c in flipped] == ["Ready", "ScalingActive"]


def test_decision_patch_fields():
    decision = Decision(current=2, replicas=5, reason="ScaledUp", message="m",
                        recommended=5, queue_depth=37.123)
    patch = decision_patch({"conditions": [READY]}, decision, MetricHistory(), now=1e9)
    assert patch["desiredReplicas"] == 5 and patch["queueDepth"] == 37.12
    assert parse_time(patch["lastScaleTime"]) == 1e9
    assert patch["autoscaler"] == {"samples": [], "runningCapacity": None, "capacityKey": None,
                                   "mode": "operator"}
    hold = Decision(current=5, replicas=5, reason="WithinTarget", message="m")
    assert "lastScaleTime" not in decision_patch({}, hold, MetricHistory(), now=1e9)
    assert parse_time("garbage") is None and parse_time(None) is None


def test_rebased_keeps_the_conditions_the_server_has_now():
    # Computed from a copy where the operator had not written Ready yet.
    fragment = condition_patch({}, "ScaledUp", "up", now=1000, mode="operator")
    fresh = {"conditions": [READY, {"type": "ScalingActive", "status": "True",
                                    "reason": "WithinTarget", "lastTransitionTime": "t0"}]}
    patch = rebased(fragment, fresh, now=2000)
    assert patch["autoscaler"] == {"mode": "operator"}
    assert [c["type"] for c in patch["conditions"]] == ["Ready", "ScalingActive"]
    assert patch["conditions"][0] == READY
    assert patch["conditions"][1]["reason"] == "ScaledUp"
    assert patch["conditions"][1]["lastTransitionTime"] == "t0"  # True before and after
    assert rebased({"queueDepth": 3}, fresh, now=2000) == {"queueDepth": 3}
