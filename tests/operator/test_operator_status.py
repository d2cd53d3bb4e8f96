"""Status from children: pure functions, and the merge that spares others' fields."""
from __future__ import annotations

import datetime

from kubellm.operator.builders.children import Topology
from kubellm.operator.status import (Observed, degraded_status, healthy_status, observe,
                                     status_patch)
from kubellm.operator.validation import defaulted_spec

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
LATER = NOW + datetime.timedelta(minutes=5)
SPEC = defaulted_spec({"model": {"source": {"huggingFace": "a/b"}}, "replicas": 2})
CR = {"metadata": {"name": "m", "namespace": "ns", "generation": 3}}


def deployment(replicas, ready, updated, generation=3, seen=3):
    return {"metadata": {"generation": generation},
            "status": {"replicas": replicas, "readyReplicas": ready,
                       "updatedReplicas": updated, "observedGeneration": seen}}


def mine(observed):
    return healthy_status(CR, SPEC, observed, selector="s", endpoint="e", model="m")


def test_observe_a_deployment():
    assert observe(Topology.SINGLE_NODE, SPEC, [deployment(2, 2, 2)]) == Observed(2, 2, True)
    assert observe(Topology.SINGLE_NODE, SPEC, [deployment(3, 2, 1)]).rollout_done is False
    assert observe(Topology.SINGLE_NODE, SPEC, [deployment(2, 2, 2, seen=2)]).rollout_done \
        is False
    assert observe(Topology.SINGLE_NODE, SPEC, []) == Observed(0, 0, False)


def test_observe_statefulset_groups_counts_whole_groups():
    spec = defaulted_spec({"model": {"source": {"huggingFace": "a/b"}}, "replicas": 2,
                           "parallelism": {"tensor": 8, "pipeline": 2}})
    full = {"status": {"replicas": 2, "readyReplicas": 2, "updatedReplicas": 2}}
    half = {"status": {"replicas": 2, "readyReplicas": 1, "updatedReplicas": 2}}
    assert observe(Topology.STATEFUL_SETS, spec, [full, half]) == Observed(2, 1, True)


def test_phases():
    assert mine(Observed(2, 2, True))["phase"] == "Ready"
    assert mine(Observed(2, 1, True))["phase"] == "Progressing"
    assert mine(Observed(2, 2, False))["phase"] == "Progressing"
    zero = healthy_status(CR, {**SPEC, "replicas": 0}, Observed(0, 0, True), selector="s",
                          endpoint="e", model="m")
    assert zero["phase"] == "Pending"
    assert degraded_status(CR, "InvalidSpec", "spec.x: bad")["phase"] == "Degraded"


def test_patch_keeps_the_autoscalers_fields_and_conditions():
    current = {"queueDepth": 12.5, "desiredReplicas": 3, "autoscaler": {"window": [1, 2]},
               "conditions": [{"type": "ScalingActive", "status": "True", "reason": "x"}]}
    patch = status_patch(current, mine(Observed(2, 2, True)), NOW)
    assert not {"queueDepth", "desiredReplicas", "autoscaler", "lastScaleTime"} & set(patch)
    types = [c["type"] for c in patch["conditions"]]
    assert types == ["Degraded", "Progressing", "Ready", "ScalingActive"]
    assert patch["readyReplicas"] == 2 and patch["observedGeneration"] == 3


def test_patch_is_none_when_nothing_changed_and_times_move_only_on_transitions():
    first = status_patch({}, mine(Observed(2, 1, True)), NOW)
    assert status_patch(first, mine(Observed(2, 1, True)), LATER) is None
    second = status_patch(first, mine(Observed(2, 2, True)), LATER)
    times = {c["type"]: c["lastTransitionTime"] for c in second["conditions"]}
    assert times["Ready"] == "2026-01-01T00:05:00Z"  # False -> True
    assert times["Degraded"] == "2026-01-01T00:00:00Z"  # unchanged
    assert set(second) == {"phase", "readyReplicas", "conditions"}
