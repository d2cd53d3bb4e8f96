"""A worker rank: ``python -m kubellm.runtime.distributed.worker --config-json '{...}'``.

Started by the launcher with the rendezvous variables (see rendezvous.py) and a lifeline
(lifeline.py): it ends at once when the process that started it does, even before its
imports are done. It joins the process group, takes the driver's StagePlan, loads its
stage's shard of the weights, agrees on the KV-cache size, captures its decode graphs,
then loops: receive the step's work from the driver, run its stage over the
micro-batches, repeat — until the driver says shutdown (exit 0), a collective fails or
the heartbeat loses the driver (exit 1).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys

from kubellm.runtime.distributed import lifeline

log = logging.getLogger("kubellm.worker")


def main(argv: list[str] | None = None) -> int:
    lifeline.watch_from_environ()  # first: the heavy imports below take seconds
    parser = argparse.ArgumentParser(prog="kubellm.runtime.distributed.worker")
    parser.add_argument("--config-json", required=True,
                        help="EngineConfig fields (the launcher passes its own)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s "
                                                   "%(name)s: %(message)s")
    # Ctrl-C reaches the whole process group; the driver decides how to stop (a server
    # drains first) and then tells us
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from kubellm.runtime.config import EngineConfig
    return run_rank(EngineConfig(**json.loads(args.config_json)))


def run_rank(local_config) -> int:
    from kubellm.runtime.assembly import resolve_dtype
    from kubellm.runtime.parallel import state as ps
    from kubellm.runtime.distributed import heartbeat, rendezvous
    from kubellm.runtime.distributed.heartbeat import Heartbeat
    from kubellm.runtime.distributed.pipeline import PipelineStage
    from kubellm.runtime.distributed.stage import (agree_num_blocks, build_stage_runner,
                                                   capture_graphs, dist_backend, finish_setup,
                                                   rank_device, share_from_driver)
    from kubellm.runtime.distributed.trace import StageTrace

    node = rendezvous.from_environ(os.environ, local_config.tensor_parallel_size,
                                   local_config.pipeline_parallel_size)
    layout = node.layout(rendezvous.local_rank_from_environ(os.environ, node),
                         local_config.tensor_parallel_size, local_config.pipeline_parallel_size)
    device = rank_device(local_config, layout)
    ps.share_cpu_cores(device, node.nproc_per_node)
    timeout = rendezvous.timeout_s(os.environ)
    store = rendezvous.join(node, layout.rank, timeout)
    parallel = ps.initialize(layout, store, dist_backend(device), timeout)
    plan = share_from_driver(None, layout, parallel)
    config = plan.engine_config()  # the driver's: every rank must build the same thing
    runner = build_stage_runner(config, layout, plan, device, resolve_dtype(config, device),
                                parallel)
    num_blocks = agree_num_blocks(config, runner, layout, parallel)
    runner.allocate_kv_cache(num_blocks)
    capture_graphs(config, runner, num_blocks)
    log.info("rank %d (stage %d, TP rank %d): layers %s, %d KV blocks", layout.rank,
             layout.pp_rank, layout.tp_rank, plan.partition[layout.pp_rank], num_blocks)
    finish_setup(parallel)
    Heartbeat(parallel.heartbeat_group, heartbeat.timeout_s(os.environ),
              _lost_the_driver).start()
    serve_steps(PipelineStage(runner, layout, parallel.tp_group,
                              StageTrace.from_environ(layout)), parallel)
    return 0


def serve_steps(stage, parallel) -> None:
    import torch.distributed as dist

    from kubellm.runtime.distributed.executor import DESCRIBE, KEEPALIVE, SHUTDOWN
    from kubellm.runtime.distributed.stage import describe_rank, share_from_driver
    from kubellm.runtime.distributed.step_work import StepWork

    while True:
        message = share_from_driver(None, stage.layout, parallel)
        if isinstance(message, StepWork):
            stage.run(message)
        elif message == DESCRIBE:
            dist.gather_object(describe_rank(stage.runner, stage.layout), None, dst=0,
                               group=parallel.control_group)
        elif message == SHUTDOWN:
            return
        elif message != KEEPALIVE:
            raise RuntimeError(f"unknown control message {message!r}")


def _lost_the_driver(why: str) -> None:
    _exit(1, f"kubellm worker (pid {os.getpid()}): lost the driver's heartbeat ({why}); "
             "exiting")


def _exit(code: int, message: str | None = None) -> None:
    """End now: the process groups' threads must not run the interpreter's teardown (a
    broken gloo group aborts the process there, exit status 134)."""
    if message:
        print(message, file=sys.stderr, flush=True)
    logging.shutdown()
    sys.stdout.flush()
    os._exit(code)


if __name__ == "__main__":
    try:
        code = main()
    except KeyboardInterrupt:
        code = 130
    except SystemExit as exc:  # argparse, a config error
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001  (a traceback, then a clean exit status)
        log.exception("worker failed")
        code = 1
    _exit(code)
