"""The rendezvous contract from both sides: the operator's multi-node children (built by
its own builders) resolved into each pod's env the way Kubernetes does it, then read by
the runtime's launcher. Every rank must appear exactly once, all pods must agree on the
master, and only node 0 may hold the driver (rank 0)."""
from __future__ import annotations

import dataclasses

import pytest

from kubellm.runtime.cli.main import build_parser
from kubellm.operator import rendezvous as names
from kubellm.operator.builders.children import build_children
from kubellm.operator.validation import defaulted_spec
from kubellm.runtime.config import EngineConfig
from kubellm.runtime.config_sources import ConfigError
from kubellm.runtime.distributed import rendezvous
from tests.contract.pod_env import pod_env

NAMESPACE = "ns"
SPEC = {"model": {"source": {"huggingFace": "org/model"}},
        "parallelism": {"tensor": 4, "pipeline": 3, "gpusPerNode": 4}, "replicas": 2}


def _children(lws: bool) -> list[dict]:
    cr = {"apiVersion": "kubellm.io/v1alpha1", "kind": "LLMDeployment",
          "metadata": {"name": "m", "namespace": NAMESPACE, "uid": "u"}, "spec": SPEC}
    return build_children(cr, defaulted_spec(SPEC), image="img", lws_available=lws)


def _engine_config(container: dict, env: dict) -> EngineConfig:
    args = build_parser().parse_args(container["args"])
    fields = {f.name for f in dataclasses.fields(EngineConfig)}
    return EngineConfig.from_sources(cli={k: v for k, v in vars(args).items() if k in fields},
                                     env=env)


def _statefulset_groups() -> list[list[tuple[dict, dict, str]]]:
    """Per replica group: (container, env, pod DNS name) of each pod, in ordinal order."""
    groups = []
    for sts in (c for c in _children(lws=False) if c["kind"] == "StatefulSet"):
        name, service = sts["metadata"]["name"], sts["spec"]["serviceName"]
        template = sts["spec"]["template"]
        pods = []
        for ordinal in range(sts["spec"]["replicas"]):
            labels = {**template["metadata"]["labels"],
                      names.STATEFULSET_INDEX_LABEL: str(ordinal)}
            container = template["spec"]["containers"][0]
            pods.append((container, pod_env(container, labels, {}),
                         f"{name}-{ordinal}.{service}.{NAMESPACE}.svc"))
        groups.append(pods)
    return groups


def _leader_worker_set_groups() -> list[list[tuple[dict, dict, str]]]:
    lws = next(c for c in _children(lws=True) if c["kind"] == "LeaderWorkerSet")
    name = lws["metadata"]["name"]
    spec = lws["spec"]["leaderWorkerTemplate"]
    groups = []
    for group in range(lws["spec"]["replicas"]):
        # the LWS controller names the leader <lws>-<group> behind a headless <lws> Service
        # and injects its address into every pod of the group
        leader_dns = f"{name}-{group}.{name}.{NAMESPACE}"
        injected = {"LWS_LEADER_ADDRESS": leader_dns}
        pods = []
        for index in range(spec["size"]):
            template = spec["leaderTemplate" if index == 0 else "workerTemplate"]
            labels = {**template["metadata"]["labels"],
                      names.LWS_WORKER_INDEX_LABEL: str(index)}
            container = template["spec"]["containers"][0]
            pods.append((container, pod_env(container, labels, injected),
                         leader_dns if index == 0 else f"{leader_dns}-{index}"))
        groups.append(pods)
    return groups


@pytest.mark.parametrize("groups", [_statefulset_groups, _leader_worker_set_groups],
                         ids=["statefulsets", "leaderworkerset"])
def test_every_pod_finds_its_ranks_and_the_master(groups):
    tensor, pipeline = SPEC["parallelism"]["tensor"], SPEC["parallelism"]["pipeline"]
    built = groups()
    assert len(built) == SPEC["replicas"]
    for pods in built:
        assert len(pods) == pipeline
        leader_dns = pods[0][2]
        seen: list[int] = []
        for node_index, (container, env, _dns) in enumerate(pods):
            config = _engine_config(container, env)
            assert (config.tensor_parallel_size, config.pipeline_parallel_size) == \
                (tensor, pipeline)
            node = rendezvous.from_environ(env, config.tensor_parallel_size,
                                           config.pipeline_parallel_size)
            assert node.master_addr == leader_dns
            assert node.master_port == names.DEFAULT_MASTER_PORT
            assert node.world_size == tensor * pipeline
            assert node.node_rank == node_index
            assert node.is_driver_node == (node_index == 0)
            # the processes the launcher starts read their rank back from its env
            for local in range(node.nproc_per_node):
                child = rendezvous.from_environ(node.child_env(local), tensor, pipeline)
                layout = child.layout(rendezvous.local_rank_from_environ(
                    node.child_env(local), child), tensor, pipeline)
                assert child.init_method == f"tcp://{leader_dns}:{names.DEFAULT_MASTER_PORT}"
                # one pod per pipeline stage: a TP group never leaves its pod
                assert (layout.pp_rank, layout.local_rank) == (node_index, local)
                assert layout.is_driver == (node_index == 0 and local == 0)
                seen.append(layout.rank)
        assert sorted(seen) == list(range(tensor * pipeline))


def test_single_node_needs_no_env_and_picks_a_free_port():
    node = rendezvous.from_environ({}, 2, 2)
    assert (node.nnodes, node.node_rank, node.nproc_per_node) == (1, 0, 4)
    assert node.master_addr == "127.0.0.1" and node.master_port > 0


@pytest.mark.parametrize("env, field", [
    ({names.NNODES: "2", names.NODE_RANK: "0", names.NPROC_PER_NODE: "4"}, names.MASTER_ADDR),
    ({names.MASTER_ADDR: "a", names.NNODES: "2", names.NODE_RANK: "2",
      names.NPROC_PER_NODE: "4"}, names.NODE_RANK),
    ({names.MASTER_ADDR: "a", names.NNODES: "2", names.NODE_RANK: "x",
      names.NPROC_PER_NODE: "4"}, names.NODE_RANK),
    ({names.MASTER_ADDR: "a", names.NNODES: "3", names.NODE_RANK: "0",
      names.NPROC_PER_NODE: "4"}, "tensor_parallel_size"),
    ({names.MASTER_ADDR: "a", names.MASTER_PORT: "70000", names.NNODES: "2",
      names.NODE_RANK: "0", names.NPROC_PER_NODE: "4"}, names.MASTER_PORT),
])
def test_bad_rendezvous_env_names_the_variable(env, field):
    with pytest.raises(ConfigError) as err:
        rendezvous.from_environ(env, 4, 2)
    assert err.value.field == field


def test_both_sides_spell_the_variables_the_same():
    """The operator and the runtime share no module: each spells the names itself."""
    assert (names.MASTER_ADDR, names.MASTER_PORT, names.NNODES, names.NODE_RANK,
            names.NPROC_PER_NODE, names.DEFAULT_MASTER_PORT) == \
        (rendezvous.MASTER_ADDR, rendezvous.MASTER_PORT, rendezvous.NNODES,
         rendezvous.NODE_RANK, rendezvous.NPROC_PER_NODE, rendezvous.DEFAULT_MASTER_PORT)
