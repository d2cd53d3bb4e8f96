"""Rollouts of the Deployment the operator builds, through a simulated Deployment
controller, scheduler and kubelet (deployment_controller.py): the strategy and the probes
exactly as built, on clusters with and without a spare GPU."""
from __future__ import annotations

import copy

import pytest

from kubellm.operator.builders.children import build_children
from kubellm.operator.builders.rollout import build_disruption_budget
from kubellm.operator.builders.startup import startup_seconds
from kubellm.operator import status
from kubellm.operator.validation import SpecError, defaulted_spec

from .deployment_controller import Rollout

CR = {"apiVersion": "kubellm.io/v1alpha1", "kind": "LLMDeployment",
      "metadata": {"name": "chat", "namespace": "ns", "uid": "uid-1", "generation": 2}}
SPEC = {"model": {"source": {"huggingFace": "Qwen/Qwen2.5-7B-Instruct"}}}
LOAD_SECONDS = 240  # a 7B model from the hub: download + load


def deployment(spec: dict) -> dict:
    built = build_children(CR, defaulted_spec(spec), image="img", lws_available=False)
    return next(c for c in built if c["kind"] == "Deployment")


def test_one_replica_with_a_spare_gpu_never_has_zero_ready_pods():
    rollout = Rollout(deployment(SPEC), node_gpus=[2], load_seconds=LOAD_SECONDS)
    rollout.settle()
    assert rollout.roll(horizon_seconds=3600)
    assert rollout.min_ready == 1
    assert rollout.max_pods == 2  # the surge pod beside the old one, never more


def test_the_old_in_place_strategy_had_an_outage():
    """The strategy the operator used before (maxSurge 0, maxUnavailable 1), on the same
    cluster: the simulation shows the outage the issue reported."""
    built = deployment({**SPEC, "rollout": {"maxSurge": 0, "maxUnavailable": 1}})
    rollout = Rollout(built, node_gpus=[2], load_seconds=LOAD_SECONDS)
    rollout.settle()
    assert rollout.roll(horizon_seconds=3600)
    assert rollout.min_ready == 0


@pytest.mark.parametrize("replicas, spare", [(3, 1), (4, 2)])
def test_several_replicas_keep_all_ready_while_they_roll(replicas, spare):
    rollout = Rollout(deployment({**SPEC, "replicas": replicas}),
                      node_gpus=[replicas + spare], load_seconds=LOAD_SECONDS)
    rollout.settle()
    assert rollout.roll(horizon_seconds=5 * 3600)
    assert rollout.min_ready == replicas


def test_without_a_spare_gpu_the_old_pod_keeps_serving_and_status_says_why():
    rollout = Rollout(deployment(SPEC), node_gpus=[1], load_seconds=LOAD_SECONDS)
    rollout.settle()
    assert not rollout.roll(horizon_seconds=3600)  # stuck, not down
    assert rollout.min_ready == 1
    pending = rollout.pending_pod_objects()
    assert len(pending) == 1
    spec = defaulted_spec(SPEC)
    observed = status.Observed(replicas=2, ready_replicas=1, rollout_done=False)
    mine = status.healthy_status(CR, spec, observed, selector="s", endpoint="e", model="m",
                                 unschedulable=status.unschedulable_message(pending))
    progressing = next(c for c in mine["conditions"] if c["type"] == "Progressing")
    assert progressing["reason"] == "PodsUnschedulable"
    assert "Insufficient nvidia.com/gpu" in progressing["message"]
    assert "maxUnavailable: 1" in progressing["message"]  # what to do about it
    assert next(c for c in mine["conditions"] if c["type"] == "Ready")["status"] == "True"


def test_a_pod_slower_than_its_startup_probe_never_serves():
    """The startup probe is modelled: a budget below the load time is a restart loop."""
    spec = {**SPEC, "rollout": {"startupTimeoutSeconds": 60}}
    rollout = Rollout(deployment(spec), node_gpus=[2], load_seconds=LOAD_SECONDS)
    with pytest.raises(AssertionError, match="never became ready"):
        rollout.settle()


@pytest.mark.parametrize("model, cached, at_least", [
    ("Qwen/Qwen2.5-7B-Instruct", False, 300 + 13 * 20),  # 7e9 x 2 bytes = 13.04 GiB
    ("Qwen/Qwen2.5-7B-Instruct", True, 300 + 13 * 4),
    ("meta-llama/Llama-3.1-70B-Instruct", False, 300 + 130 * 20),
    ("org/unknown-size", False, 3600),
])
def test_startup_budget_grows_with_the_weights_and_their_source(model, cached, at_least):
    spec = {"model": {"source": {"huggingFace": model}, **({"cache": {"size": "1Ti"}}
                                                           if cached else {})}}
    seconds = startup_seconds(defaulted_spec(spec))
    assert at_least <= seconds < at_least + 60
    container = deployment(spec)["spec"]["template"]["spec"]["containers"][0]
    probe = container["startupProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] >= seconds
    given = startup_seconds(defaulted_spec({**spec, "rollout": {"startupTimeoutSeconds": 900}}))
    assert given == 900


def test_rollout_fields_reach_the_deployment_and_bad_ones_are_refused():
    built = deployment({**SPEC, "rollout": {"maxSurge": "50%", "maxUnavailable": "25%"}})
    assert built["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": "50%",
                                                          "maxUnavailable": "25%"}
    with pytest.raises(SpecError, match="spec.rollout: maxSurge and maxUnavailable"):
        deployment({**SPEC, "rollout": {"maxSurge": "0%", "maxUnavailable": 0}})


def test_a_disruption_budget_only_with_several_replicas():
    def kinds(spec):
        return {c["kind"] for c in build_children(CR, defaulted_spec(spec), image="i",
                                                   lws_available=False)}
    assert "PodDisruptionBudget" not in kinds(SPEC)  # it would block every node drain
    assert "PodDisruptionBudget" in kinds({**SPEC, "replicas": 2})
    pdb = build_disruption_budget(copy.deepcopy(CR))
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": "kubellm",
                                                      "app.kubernetes.io/instance": "chat"}
