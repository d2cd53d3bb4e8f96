"""``kubellm-activator``: hold requests for an LLMDeployment scaled to zero (see
kubellm.operator.activator). The operator runs it; its flags are what the pod sets."""
from __future__ import annotations

import argparse
import logging

from aiohttp import web

from kubellm.operator.activator.proxy import Activator
from kubellm.operator.activator.upstream import Upstreams


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kubellm-activator", description=__doc__)
    parser.add_argument("--upstream", required=True,
                        help="DNS name of the headless Service of the ready replicas")
    parser.add_argument("--upstream-port", type=int, default=8000,
                        help="the replicas' HTTP port")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--served-model-name", required=True,
                        help="model_name label of the metrics (the replicas' served name)")
    parser.add_argument("--hold-timeout-seconds", type=float, default=900.0,
                        help="longest a request waits for a replica before a 503")
    parser.add_argument("--resolve-interval-seconds", type=float, default=1.0,
                        help="how often the replicas' addresses are looked up")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for flag in ("hold_timeout_seconds", "resolve_interval_seconds"):
        if getattr(args, flag) <= 0:
            raise SystemExit(f"--{flag.replace('_', '-')} must be > 0")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    upstreams = Upstreams(args.upstream, args.upstream_port, args.resolve_interval_seconds)
    activator = Activator(upstreams, args.served_model_name, args.hold_timeout_seconds)
    web.run_app(activator.app(), host=args.host, port=args.port, access_log=None,
                shutdown_timeout=args.hold_timeout_seconds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
