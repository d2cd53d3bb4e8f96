"""``kubellm serve [MODEL]``: load one model and serve the OpenAI-compatible HTTP API.

Every EngineConfig field and every ServerConfig field is a flag, a KUBELLM_* variable
and a key of the ``--config`` YAML file (one file may hold both kinds).
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import sys

from kubellm.runtime.config import EngineConfig
from kubellm.runtime.config_sources import ConfigError, add_cli_args, resolve
from kubellm.runtime.server.config import ServerConfig


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "serve", help="serve a model over an OpenAI-compatible HTTP API",
        description=__doc__.splitlines()[0].strip("`"))
    parser.add_argument("model", nargs="?", default=argparse.SUPPRESS,
                        help="model directory or Hugging Face id (default: the embedded "
                             "SmolLM2-135M-Instruct)")
    parser.add_argument("--config", dest="config_file", metavar="FILE", default=None,
                        help="YAML file of engine and server fields")
    engine_group = parser.add_argument_group("engine")
    add_cli_args(engine_group, EngineConfig, skip=("model",))
    server_group = parser.add_argument_group("server")
    add_cli_args(server_group, ServerConfig)
    parser.set_defaults(func=run)


def resolve_configs(args: argparse.Namespace, env=None) -> tuple[EngineConfig, ServerConfig]:
    given = vars(args)
    engine_fields = {f.name for f in dataclasses.fields(EngineConfig)}
    server_fields = {f.name for f in dataclasses.fields(ServerConfig)}
    engine = resolve(EngineConfig, cli={k: v for k, v in given.items() if k in engine_fields},
                     config_file=args.config_file, env=env,
                     yaml_extra_fields=frozenset(server_fields))
    server = resolve(ServerConfig, cli={k: v for k, v in given.items() if k in server_fields},
                     config_file=args.config_file, env=env,
                     yaml_extra_fields=frozenset(engine_fields))
    return engine, server


def run(args: argparse.Namespace) -> int:
    try:
        engine_config, server_config = resolve_configs(args)
    except ConfigError as exc:
        print(f"kubellm serve: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: "
                                                   "%(message)s")
    from kubellm.runtime.engine import LLMEngine
    from kubellm.runtime.server.app import build_app
    from kubellm.runtime.server.lifecycle import serve

    try:
        engine = LLMEngine.from_config(engine_config)
    except ConfigError as exc:
        print(f"kubellm serve: {exc}", file=sys.stderr)
        return 2
    serve(build_app(engine, server_config), server_config)
    return 0
