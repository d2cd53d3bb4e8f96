"""The rendezvous env contract: which node this is and where rank 0 listens.

Across pods the operator writes the variables: ``KUBELLM_MASTER_ADDR``/
``KUBELLM_MASTER_PORT`` (rank 0's TCPStore), ``KUBELLM_NNODES``, ``KUBELLM_NODE_RANK``,
``KUBELLM_NPROC_PER_NODE``. The operator spells them in its own module (the two never
import each other); tests/contract resolves the operator's pods into env and reads them
back here, so a rename on one side fails there. On one
node nothing is set: the driver picks a free loopback port and runs every rank itself.
Each process the launcher starts gets the node's variables plus ``KUBELLM_LOCAL_RANK``;
its global rank is ``NODE_RANK * NPROC_PER_NODE + LOCAL_RANK``.
"""
from __future__ import annotations

import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta

from kubellm.runtime.config_sources import ConfigError
from kubellm.runtime.distributed.layout import RankLayout

MASTER_ADDR = "KUBELLM_MASTER_ADDR"  # DNS name of node 0 (rank 0's TCPStore)
MASTER_PORT = "KUBELLM_MASTER_PORT"
NNODES = "KUBELLM_NNODES"  # nodes (pods) in the group
NODE_RANK = "KUBELLM_NODE_RANK"  # this node's index, 0 = the driver
NPROC_PER_NODE = "KUBELLM_NPROC_PER_NODE"  # processes (GPUs) per node
DEFAULT_MASTER_PORT = 29500
LOCAL_RANK = "KUBELLM_LOCAL_RANK"  # set by our launcher on each process it starts
TIMEOUT = "KUBELLM_DIST_TIMEOUT_S"  # collective / rendezvous timeout, seconds
DEFAULT_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class NodeEnv:
    master_addr: str
    master_port: int
    nnodes: int
    node_rank: int
    nproc_per_node: int

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    @property
    def is_driver_node(self) -> bool:
        """Node 0 runs the driver (global rank 0), the scheduler and the HTTP server."""
        return self.node_rank == 0

    @property
    def init_method(self) -> str:
        return f"tcp://{self.master_addr}:{self.master_port}"

    def global_rank(self, local_rank: int) -> int:
        return self.node_rank * self.nproc_per_node + local_rank

    def layout(self, local_rank: int, tp_size: int, pp_size: int) -> RankLayout:
        return RankLayout(self.global_rank(local_rank), tp_size, pp_size, local_rank)

    def check_matches(self, tp_size: int, pp_size: int) -> None:
        if self.world_size != tp_size * pp_size:
            raise ConfigError(
                "tensor_parallel_size", f"{NNODES}={self.nnodes} x "
                f"{NPROC_PER_NODE}={self.nproc_per_node} = {self.world_size} processes, "
                f"but tensor_parallel_size x pipeline_parallel_size = {tp_size * pp_size}")

    def child_env(self, local_rank: int) -> dict[str, str]:
        """The variables a process started by our launcher reads back with from_environ."""
        return {MASTER_ADDR: self.master_addr, MASTER_PORT: str(self.master_port),
                NNODES: str(self.nnodes), NODE_RANK: str(self.node_rank),
                NPROC_PER_NODE: str(self.nproc_per_node), LOCAL_RANK: str(local_rank)}


def from_environ(env: Mapping[str, str], tp_size: int, pp_size: int) -> NodeEnv:
    """This node's rendezvous: from the operator's variables when ``KUBELLM_NNODES`` is
    set, else one node running all ``tp_size * pp_size`` ranks on loopback."""
    if NNODES not in env:
        port = _int(env, MASTER_PORT, 0) or free_port()
        node = NodeEnv(env.get(MASTER_ADDR, "127.0.0.1"), port, 1, 0,
                       tp_size * pp_size)
    else:
        node = NodeEnv(_required(env, MASTER_ADDR),
                       _int(env, MASTER_PORT, DEFAULT_MASTER_PORT),
                       _int(env, NNODES), _int(env, NODE_RANK),
                       _int(env, NPROC_PER_NODE))
        if node.nnodes < 1 or node.nproc_per_node < 1:
            raise ConfigError(NNODES, f"{NNODES} and {NPROC_PER_NODE} must "
                                            "be positive")
        if not 0 <= node.node_rank < node.nnodes:
            raise ConfigError(NODE_RANK, f"{NODE_RANK}={node.node_rank} is outside "
                                               f"0..{node.nnodes - 1}")
    if not 0 < node.master_port < 65536:
        raise ConfigError(MASTER_PORT, f"{MASTER_PORT}={node.master_port} is not "
                                             "a TCP port")
    node.check_matches(tp_size, pp_size)
    return node


def local_rank_from_environ(env: Mapping[str, str], node: NodeEnv) -> int:
    local = _int(env, LOCAL_RANK)
    if not 0 <= local < node.nproc_per_node:
        raise ConfigError(LOCAL_RANK, f"{LOCAL_RANK}={local} is outside "
                                      f"0..{node.nproc_per_node - 1}")
    return local


def timeout_s(env: Mapping[str, str]) -> float:
    raw = env.get(TIMEOUT)
    try:
        value = float(raw) if raw else DEFAULT_TIMEOUT_S
    except ValueError:
        raise ConfigError(TIMEOUT, f"{TIMEOUT}={raw!r} is not a number of seconds") from None
    if value <= 0:
        raise ConfigError(TIMEOUT, f"{TIMEOUT} must be positive, got {raw!r}")
    return value


JOINED_KEY = "kubellm/joined"
JOIN_POLL_S = 0.2


def join(node: NodeEnv, rank: int, timeout: float, check: Callable[[], None] = lambda: None):
    """This rank's connection to rank 0's TCPStore, once every rank has connected.

    Rank 0 hosts the store and waits for the others in a loop that calls ``check()``
    between polls (it raises when a local worker has died, instead of waiting out the
    whole timeout for a rank that will never come); the others connect and report."""
    import torch.distributed as dist
    is_master = rank == 0
    store = dist.TCPStore(node.master_addr, node.master_port, node.world_size, is_master,
                          timedelta(seconds=timeout), wait_for_workers=False)
    store.add(JOINED_KEY, 1)
    if is_master:
        deadline = time.monotonic() + timeout
        while (joined := store.add(JOINED_KEY, 0)) < node.world_size:
            check()
            if time.monotonic() > deadline:
                raise TimeoutError(f"{joined} of {node.world_size} ranks joined the "
                                   f"rendezvous at {node.init_method} within {timeout:.0f} s "
                                   f"({TIMEOUT})")
            time.sleep(JOIN_POLL_S)
    return store


def free_port() -> int:
    """A TCP port free on loopback right now (the driver binds it moments later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _required(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "").strip()
    if not value:
        raise ConfigError(name, f"{name} must be set when {NNODES} is")
    return value


def _int(env: Mapping[str, str], name: str, default: int | None = None) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        if default is None:
            raise ConfigError(name, f"{name} must be set")
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(name, f"{name}={raw!r} is not an integer") from None
