"""``kubellm serve [MODEL]``: load one model and serve the OpenAI-compatible HTTP API.

Every EngineConfig field and every ServerConfig field is a flag, a KUBELLM_* variable
and a key of the ``--config`` YAML file (one file may hold both kinds).
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys

from kubellm.runtime.config import EngineConfig
from kubellm.runtime.config_sources import ConfigError, add_cli_args, resolve
from kubellm.runtime.cli.engine_args import add_engine_args, engine_config_from_args
from kubellm.runtime.server.config import ServerConfig


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "serve", help="serve a model over an OpenAI-compatible HTTP API",
        description="Load one model and serve the OpenAI-compatible HTTP API.")
    parser.add_argument("model", nargs="?", default=argparse.SUPPRESS,
                        help="model directory or Hugging Face id (default: the embedded "
                             "SmolLM2-135M-Instruct)")
    parser.add_argument("--model", dest="model_option", default=argparse.SUPPRESS,
                        metavar="MODEL", help="the same as the positional MODEL (vLLM's "
                                              "spelling)")
    add_engine_args(parser)
    add_cli_args(parser.add_argument_group("server"), ServerConfig)
    parser.set_defaults(func=run)


def resolve_configs(args: argparse.Namespace) -> tuple[EngineConfig, ServerConfig]:
    """Both configs from one set of sources; exit(2) naming a bad field."""
    if hasattr(args, "model_option"):
        if hasattr(args, "model") and args.model != args.model_option:
            print(f"kubellm: error: the model is given twice ({args.model!r} and --model "
                  f"{args.model_option!r})", file=sys.stderr)
            raise SystemExit(2)
        args.model = args.model_option
    server_fields = {f.name for f in dataclasses.fields(ServerConfig)}
    engine_fields = {f.name for f in dataclasses.fields(EngineConfig)}
    engine = engine_config_from_args(args, yaml_extra_fields=frozenset(server_fields))
    try:
        server = resolve(ServerConfig,
                         cli={k: v for k, v in vars(args).items() if k in server_fields},
                         config_file=args.config, yaml_extra_fields=frozenset(engine_fields))
    except ConfigError as exc:
        print(f"kubellm: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    return engine, server


def run(args: argparse.Namespace) -> int:
    engine_config, server_config = resolve_configs(args)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if _runs_workers_only(engine_config):
        # a pod other than node 0 of a multi-node group: no HTTP, no engine core; this
        # runs the node's ranks and exits with their status (SystemExit)
        from kubellm.runtime.engine.llm_engine import LLMEngine
        try:
            LLMEngine.from_config(engine_config)
        except ConfigError as exc:
            print(f"kubellm: error: {exc}", file=sys.stderr)
            return 2
        return 0
    from kubellm.runtime.server.supervisor import serve

    return serve(engine_config, server_config)


def _runs_workers_only(config: EngineConfig) -> bool:
    if config.tensor_parallel_size * config.pipeline_parallel_size == 1:
        return False
    from kubellm.runtime.distributed import rendezvous
    try:
        node = rendezvous.from_environ(os.environ, config.tensor_parallel_size,
                                       config.pipeline_parallel_size)
    except ConfigError:
        return False  # the engine core reports it, naming the variable
    return not node.is_driver_node
