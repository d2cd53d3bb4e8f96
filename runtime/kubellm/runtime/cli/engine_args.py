"""Engine flags (one per EngineConfig field) and their resolution with --config and env."""
from __future__ import annotations

import argparse
import sys

from kubellm.runtime.config import EngineConfig
from kubellm.runtime.config_sources import ConfigError, add_cli_args


def add_engine_args(parser: argparse.ArgumentParser, skip=("model",)) -> None:
    parser.add_argument("--config", metavar="FILE", help="YAML file of config fields")
    add_cli_args(parser.add_argument_group("engine"), EngineConfig, skip=skip)


def engine_config_from_args(args: argparse.Namespace, yaml_extra_fields=frozenset(),
                            **overrides) -> EngineConfig:
    """Resolve defaults < --config < KUBELLM_* < flags; exit(2) naming a bad field."""
    from dataclasses import fields
    names = {f.name for f in fields(EngineConfig)}
    cli = {k: v for k, v in vars(args).items() if k in names and k not in overrides}
    try:
        return EngineConfig.from_sources(cli=cli, config_file=args.config,
                                         yaml_extra_fields=yaml_extra_fields, **overrides)
    except ConfigError as exc:
        print(f"kubellm: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
