"""A worker rank: ``python -m kubellm.runtime.distributed.worker --config-json '{...}'``.

Started by the launcher with the rendezvous variables (see rendezvous.py). It joins the
process group, takes the driver's StagePlan, loads its stage's shard of the weights,
agrees on the KV-cache size, then loops: receive the step's work from the driver, run
its stage over the micro-batches, repeat — until the driver says shutdown (exit 0) or a
collective fails (exit 1). It exits as well when the process that started it goes away.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time

import torch.distributed as dist

from kubellm.runtime.config import EngineConfig
from kubellm.runtime.parallel import state as ps
from kubellm.runtime.distributed import rendezvous
from kubellm.runtime.distributed.executor import DESCRIBE, HEARTBEAT, SHUTDOWN
from kubellm.runtime.distributed.pipeline import PipelineStage
from kubellm.runtime.distributed.stage import (agree_num_blocks, build_stage_runner,
                                               describe_rank, dist_backend, rank_device,
                                               share_from_driver)
from kubellm.runtime.distributed.step_work import StepWork
from kubellm.runtime.distributed.trace import StageTrace
from kubellm.runtime.assembly import resolve_dtype

log = logging.getLogger("kubellm.worker")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kubellm.runtime.distributed.worker")
    parser.add_argument("--config-json", required=True,
                        help="EngineConfig fields (the launcher passes its own)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s "
                                                   "%(name)s: %(message)s")
    _exit_with_parent()
    # Ctrl-C reaches the whole process group; the driver decides how to stop (a server
    # drains first) and then tells us
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    local_config = EngineConfig(**json.loads(args.config_json))
    node = rendezvous.from_environ(os.environ, local_config.tensor_parallel_size,
                                   local_config.pipeline_parallel_size)
    layout = node.layout(rendezvous.local_rank_from_environ(os.environ, node),
                         local_config.tensor_parallel_size, local_config.pipeline_parallel_size)
    device = rank_device(local_config, layout)
    ps.share_cpu_cores(device, node.nproc_per_node)
    ps.initialize(layout, node.init_method, dist_backend(device),
                  rendezvous.timeout_s(os.environ))
    plan = share_from_driver(None, layout)
    config = plan.engine_config()  # the driver's: every rank must build the same thing
    runner = build_stage_runner(config, layout, plan, device, resolve_dtype(config, device))
    num_blocks = agree_num_blocks(config, runner, layout)
    runner.allocate_kv_cache(num_blocks)
    log.info("rank %d (stage %d, TP rank %d): layers %s, %d KV blocks", layout.rank,
             layout.pp_rank, layout.tp_rank, plan.partition[layout.pp_rank], num_blocks)
    serve_steps(PipelineStage(runner, layout, StageTrace.from_environ(layout)))
    ps.destroy()
    return 0


def serve_steps(stage: PipelineStage) -> None:
    control = ps.state().control_group
    while True:
        message = share_from_driver(None, stage.layout)
        if isinstance(message, StepWork):
            stage.run(message)
        elif message == DESCRIBE:
            dist.gather_object(describe_rank(stage.runner, stage.layout), None, dst=0,
                               group=control)
        elif message == SHUTDOWN:
            return
        elif message != HEARTBEAT:
            raise RuntimeError(f"unknown control message {message!r}")


def _exit_with_parent() -> None:
    """Our launcher may be killed without a chance to stop us: do not outlive it."""
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)
    threading.Thread(target=watch, name="kubellm-parent-watch", daemon=True).start()


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
