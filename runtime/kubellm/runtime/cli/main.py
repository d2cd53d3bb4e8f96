"""The ``kubellm`` command: one subcommand per job.

Each subcommand lives in its own module exposing ``register(subparsers)``, which adds
its parser and sets ``func``. Modules import their heavy dependencies (torch) inside
``func`` so that ``kubellm --help`` stays light.

Other distributions add subcommands through the ``kubellm.subcommands`` entry-point
group: with kubellm-operator installed, ``kubellm operator`` is its command, without the
runtime ever importing the operator.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from importlib.metadata import entry_points

from kubellm.runtime.version import __version__

# subcommand -> module that registers it
SUBCOMMANDS = {
    "generate": "kubellm.runtime.cli.generate",
    "serve": "kubellm.runtime.cli.serve",
    "bench": "kubellm.runtime.cli.bench",
    "download": "kubellm.runtime.cli.download",
}
PLUGIN_GROUP = "kubellm.subcommands"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kubellm", description="kubellm: LLM serving on Kubernetes — the inference "
                                    "engine and its OpenAI-compatible server")
    parser.add_argument("--version", action="version", version=f"kubellm {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in SUBCOMMANDS.values():
        importlib.import_module(module_name).register(subparsers)
    for plugin in entry_points(group=PLUGIN_GROUP):
        if plugin.name not in SUBCOMMANDS:
            plugin.load()(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
