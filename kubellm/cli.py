"""The ``kubellm`` command: one subcommand per job.

Each subcommand lives in its own module exposing ``register(subparsers)``, which adds
its parser and sets ``func``. Modules import their heavy dependencies (torch, kopf)
inside ``func`` so that ``kubellm --help`` and ``kubellm operator`` stay light.
"""
from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> module that registers it
SUBCOMMANDS = {
    "generate": "kubellm.runtime.cli.generate",
    "serve": "kubellm.runtime.cli.serve",
    "bench": "kubellm.runtime.cli.bench",
    "operator": "kubellm.operator.cli",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kubellm", description="kubellm: LLM serving on Kubernetes — the inference "
                                    "engine, its OpenAI-compatible server and the operator")
    parser.add_argument("--version", action="version", version=_version())
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in SUBCOMMANDS.values():
        importlib.import_module(module_name).register(subparsers)
    return parser


def _version() -> str:
    from kubellm import __version__
    return f"kubellm {__version__}"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
