"""Mixture-of-experts sizing: memory from the total parameter count (every expert stays
resident), CPUs of CPU pods from the active count (what a token computes); both read
from the name ("Qwen3-30B-A3B") unless the spec states them."""
from __future__ import annotations

import pytest

from kubellm.operator.builders.sizing import (active_parameter_count, parameter_count,
                                              parse_active_parameters, parse_parameters)
from kubellm.operator.validation import SpecError, defaulted_spec
from tests.operator.test_operator_hardening import build, pod_templates

MOE = {"source": {"huggingFace": "Qwen/Qwen3-30B-A3B"}}
DENSE_30B = {"source": {"huggingFace": "org/Dense-30B"}}
CPU = {"accelerator": "none"}


def requests(spec: dict) -> dict:
    return pod_templates(build(spec))[0]["spec"]["containers"][0]["resources"]["requests"]


@pytest.mark.parametrize("name, total, active", [
    ("Qwen3-30B-A3B", 30e9, 3e9), ("Qwen3-235B-A22B-Instruct-2507", 235e9, 22e9),
    ("Qwen1.5-MoE-A2.7B", None, 2.7e9), ("Mixtral-8x7B-v0.1", 56e9, None),
    ("Llama-3.1-8B", 8e9, None)])
def test_total_and_active_counts_from_names(name, total, active):
    assert parse_parameters(name) == total
    assert parse_active_parameters(name) == active


def test_memory_follows_the_total_and_cpus_the_active_count():
    moe, dense = defaulted_spec({"model": MOE}), defaulted_spec({"model": DENSE_30B})
    assert parameter_count(moe) == parameter_count(dense) == 30e9
    assert (active_parameter_count(moe), active_parameter_count(dense)) == (3e9, 30e9)
    moe_cpu, dense_cpu = requests({"model": MOE, "resources": CPU}), \
        requests({"model": DENSE_30B, "resources": CPU})
    # 30B in fp32 (CPU) = 111.8 GiB + 2 base + 1 KV cache + 2 of /dev/shm, the same for both
    assert moe_cpu["memory"] == dense_cpu["memory"] == "117Gi"
    # 2 CPUs + 1 per further billion active parameters, at most 16
    assert (moe_cpu["cpu"], dense_cpu["cpu"]) == ("4", "16")
    # GPU pods: the host memory maps the largest shard whatever the active count (+ 2 GiB
    # of /dev/shm); a pod that downloads its weights asks ephemeral storage for all of them
    assert requests({"model": MOE}) == requests({"model": DENSE_30B}) == \
        {"cpu": "3", "memory": "11Gi", "ephemeral-storage": "57Gi"}


def test_stated_counts_win_over_the_name():
    spec = {"model": {**MOE, "parameters": "31B", "activeParameters": "8B"},
            "resources": CPU}
    assert requests(spec)["cpu"] == "9"
    # a stated total alone: the name's active part is not trusted against it
    assert active_parameter_count(defaulted_spec({"model": {**MOE, "parameters": "8B"}})) == 8e9


def test_active_count_above_the_total_is_refused_by_name():
    with pytest.raises(SpecError, match=r"spec.model.activeParameters \(70B\) exceeds "
                                        r"spec.model.parameters \(8B\)"):
        defaulted_spec({"model": {**MOE, "parameters": "8B", "activeParameters": "70B"}})
    with pytest.raises(SpecError, match="spec.model.activeParameters: 'three' does not match"):
        defaulted_spec({"model": {**MOE, "activeParameters": "three"}})

