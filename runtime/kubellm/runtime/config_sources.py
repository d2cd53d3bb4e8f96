"""Building a config dataclass from its four sources, in order of precedence:
defaults < YAML file (``--config``) < environment ``KUBELLM_<FIELD>`` < CLI flags.

Works for any dataclass whose fields carry ``metadata={"help": ...}``: the engine's
EngineConfig and the server's options share it, so every knob has one spelling per
source (``max_num_seqs`` / ``KUBELLM_MAX_NUM_SEQS`` / ``--max-num-seqs``).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import types
import typing
from typing import Any, Mapping

import yaml

ENV_PREFIX = "KUBELLM_"


class ConfigError(ValueError):
    """An invalid setting; the message names the field and the source it came from."""

    def __init__(self, field: str, message: str):
        super().__init__(f"invalid config field '{field}': {message}")
        self.field = field


def _field_types(cls) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init}


def _base_type(tp) -> tuple[type, bool]:
    """(scalar type, is_optional) for ``int``, ``int | None``, ``Optional[str]``..."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0], True
    return tp, False


def parse_value(field: str, tp, raw: Any, source: str) -> Any:
    """Convert a string (env, YAML scalar) to the field's type, or raise ConfigError."""
    base, optional = _base_type(tp)
    if raw is None or (optional and isinstance(raw, str) and raw.lower() in ("", "none", "null")):
        if optional:
            return None
        raise ConfigError(field, f"must not be empty ({source})")
    if not isinstance(raw, str):
        if base is float and isinstance(raw, int) and not isinstance(raw, bool):
            return float(raw)
        if isinstance(raw, base):
            return raw
        raise ConfigError(field, f"expected {base.__name__}, got {raw!r} ({source})")
    try:
        if base is bool:
            lowered = raw.strip().lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        return base(raw)
    except ValueError:
        raise ConfigError(field, f"expected {base.__name__}, got {raw!r} ({source})") from None


def add_cli_args(parser: argparse.ArgumentParser, cls, skip: tuple[str, ...] = ()) -> None:
    """One ``--flag-name`` per field; absent flags stay absent (argparse.SUPPRESS)."""
    for name, tp in _field_types(cls).items():
        if name in skip:
            continue
        f = next(f for f in dataclasses.fields(cls) if f.name == name)
        flag = "--" + name.replace("_", "-")
        help_text = f.metadata.get("help", "")
        default = f.default if f.default is not dataclasses.MISSING else None
        choices = f.metadata.get("choices")
        base, _ = _base_type(tp)
        if base is bool:
            parser.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction,
                                default=argparse.SUPPRESS,
                                help=f"{help_text} (default: {default})")
        else:
            parser.add_argument(flag, dest=name, default=argparse.SUPPRESS, metavar=name.upper(),
                                choices=choices, type=lambda raw, n=name, t=tp:
                                _cli_value(n, t, raw),
                                help=f"{help_text} (default: {default})")


def _cli_value(name, tp, raw):
    try:
        return parse_value(name, tp, raw, "command line")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def resolve(cls, cli: Mapping[str, Any] | None = None, config_file: str | None = None,
            env: Mapping[str, str] | None = None, yaml_extra_fields: frozenset[str] = frozenset(),
            **overrides):
    """Merge the sources into one validated instance of ``cls``.

    ``overrides`` (keyword arguments from Python callers such as ``LLM(...)``) rank
    with the CLI flags, above the environment. ``yaml_extra_fields`` are keys the YAML
    file may hold for another config class (the server's options beside the engine's).
    """
    types_ = _field_types(cls)
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    if config_file:
        values.update(_read_yaml(cls, config_file, types_, yaml_extra_fields))
    for name, tp in types_.items():
        key = ENV_PREFIX + name.upper()
        if key in env:
            values[name] = parse_value(name, tp, env[key], f"environment {key}")
    for source in (cli or {}, overrides):
        for name, value in source.items():
            if name not in types_:
                raise ConfigError(name, f"unknown field for {cls.__name__}")
            values[name] = value
    try:
        return cls(**values)
    except TypeError as exc:  # a wrong type that slipped past parsing
        raise ConfigError("?", str(exc)) from None


def _read_yaml(cls, path: str, types_: dict[str, Any], extra: frozenset[str]) -> dict[str, Any]:
    try:
        with open(path) as fh:
            data = yaml.safe_load(fh) or {}
    except OSError as exc:
        raise ConfigError("config", f"cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError("config", f"{path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError("config", f"{path} must hold a mapping of field: value")
    out = {}
    for key, raw in data.items():
        name = str(key).replace("-", "_")
        if name in extra:
            continue
        if name not in types_:
            raise ConfigError(name, f"unknown field in {path}")
        out[name] = parse_value(name, types_[name], raw, f"file {path}")
    return out
