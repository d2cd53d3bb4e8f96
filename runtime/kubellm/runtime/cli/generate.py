"""``kubellm generate PROMPT``: offline generation on the command line."""
from __future__ import annotations

import argparse
import sys

from kubellm.runtime.cli.engine_args import add_engine_args, engine_config_from_args
from kubellm.runtime.cli.sampling_args import add_sampling_args, sampling_params_from_args


def register(subparsers) -> None:
    p = subparsers.add_parser("generate", help="generate text offline from a prompt",
                              formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("prompt", nargs="+", help="prompt text (several: one request each)")
    p.add_argument("--model", default=None,
                   help="model directory or HF id (default: embedded SmolLM2-135M-Instruct)")
    add_sampling_args(p)
    add_engine_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import logging
    logging.basicConfig(level=logging.WARNING)
    from kubellm.runtime.engine.llm import LLM
    from kubellm.runtime.core.errors import EngineDeadError
    from kubellm.runtime.core.sampling_params import ParameterError

    config = engine_config_from_args(args, model=args.model)
    try:
        params = sampling_params_from_args(args)
    except ParameterError as exc:
        print(f"kubellm: error: {exc}")
        return 2
    try:
        with LLM(config=config) as llm:
            outputs = llm.generate(args.prompt, params)
    except EngineDeadError as exc:
        print(f"kubellm: error: {exc}", file=sys.stderr)
        return 1
    for prompt, out in zip(args.prompt, outputs):
        for sample in out.outputs:
            print(prompt + sample.text)
    return 0
