"""`kubellm operator`: run the LLMDeployment operator (Kopf) until stopped."""
from __future__ import annotations

import argparse
import os

from kubellm.operator.builders.images import DEFAULT_ACTIVATOR_IMAGE, DEFAULT_EPP_IMAGE
from kubellm.operator.version import __version__

DEFAULT_IMAGE = f"ghcr.io/kubellm/kubellm:{__version__}"


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "operator", help="run the LLMDeployment operator",
        description="Reconcile LLMDeployment objects into GPU pods. Uses the in-cluster "
                    "service account, else KUBECONFIG / ~/.kube/config.")
    add_arguments(parser)
    parser.set_defaults(func=run)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--namespace", "-n", action="append", default=[],
                        help="watch only this namespace (repeatable); default: all")
    parser.add_argument("--liveness-port", type=int, default=8080,
                        help="port of the /healthz liveness endpoint; 0 disables it")
    parser.add_argument("--default-image",
                        default=os.environ.get("KUBELLM_IMAGE", DEFAULT_IMAGE),
                        help="runtime image for LLMDeployments without spec.image "
                             "(env KUBELLM_IMAGE)")
    parser.add_argument("--resync-seconds", type=float, default=30.0,
                        help="seconds between two full passes over each LLMDeployment")
    parser.add_argument("--log-format", choices=["json", "plain", "full"], default="json",
                        help="json: one structured object per line")
    parser.add_argument("--network-policy", action="store_true",
                        help="give LLMDeployments that leave spec.networkPolicy.enabled "
                             "unset a NetworkPolicy")
    parser.add_argument("--network-policy-scraper", action="append", default=[],
                        type=_peer, metavar="JSON",
                        help="a NetworkPolicyPeer (JSON) admitted to every runtime pod's "
                             "/metrics, e.g. the operator itself or Prometheus (repeatable)")
    parser.add_argument("--controllers", type=_controllers, default="reconciler,autoscaler",
                        help="which controllers run, comma-separated: reconciler, autoscaler")
    parser.add_argument("--autoscaler-tick-seconds", type=float,
                        default=float(os.environ.get("KUBELLM_AUTOSCALER_TICK_SECONDS", "1")),
                        help="how often the autoscaler checks each LLMDeployment (it acts "
                             "every spec.autoscaling.scrapeIntervalSeconds)")
    parser.add_argument("--cache-retry-seconds", type=float, default=60.0,
                        help="wait before a failed model-cache loader Job is tried again; "
                             "it doubles with each failure, up to 30 minutes")
    parser.add_argument("--epp-image", default=DEFAULT_EPP_IMAGE,
                        help="Endpoint Picker image for LLMDeployments with spec.routing "
                             "that name none")
    parser.add_argument("--activator-image", default=os.environ.get(
                            "KUBELLM_ACTIVATOR_IMAGE", DEFAULT_ACTIVATOR_IMAGE),
                        help="image with `kubellm-activator` (the operator's own) for "
                             "LLMDeployments that scale from zero (env KUBELLM_ACTIVATOR_IMAGE)")
    parser.add_argument("--verbose", action="store_true", help="debug logs")


def _controllers(text: str) -> frozenset[str]:
    chosen = frozenset(part.strip() for part in text.split(",") if part.strip())
    unknown = chosen - {"reconciler", "autoscaler"}
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(
            f"choose among reconciler, autoscaler; got {text!r}")
    return chosen


def _peer(text: str) -> dict:
    import json

    try:
        peer = json.loads(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not JSON: {e}") from None
    if not isinstance(peer, dict) or not set(peer) <= {"podSelector", "namespaceSelector",
                                                        "ipBlock"}:
        raise argparse.ArgumentTypeError(
            "a NetworkPolicyPeer: an object of podSelector, namespaceSelector, ipBlock")
    return peer


def run(args: argparse.Namespace) -> int:
    import kopf  # noqa: PLC0415 (lazy: `kubellm --help` must not pay for it)

    from kubellm.operator.builders.network_policy import NetworkPolicyDefaults
    from kubellm.operator.handlers import OperatorConfig, register_handlers

    if args.resync_seconds <= 0:
        raise SystemExit(f"--resync-seconds must be > 0, got {args.resync_seconds}")
    if args.cache_retry_seconds <= 0:
        raise SystemExit(f"--cache-retry-seconds must be > 0, got {args.cache_retry_seconds}")
    policy = NetworkPolicyDefaults(enabled=args.network_policy,
                                   scrapers=args.network_policy_scraper)
    register_handlers(OperatorConfig(default_image=args.default_image,
                                     resync_seconds=args.resync_seconds,
                                     network_policy=policy,
                                     reconcile="reconciler" in args.controllers,
                                     autoscale="autoscaler" in args.controllers,
                                     autoscaler_tick_seconds=args.autoscaler_tick_seconds,
                                     cache_retry_seconds=args.cache_retry_seconds,
                                     epp_image=args.epp_image,
                                     activator_image=args.activator_image))
    kopf.configure(verbose=args.verbose, log_format=kopf.LogFormat[args.log_format.upper()],
                   log_refkey="object")
    liveness = (f"http://0.0.0.0:{args.liveness_port}/healthz"
                if args.liveness_port else None)
    kopf.run(standalone=True, clusterwide=not args.namespace,
             namespaces=args.namespace, liveness_endpoint=liveness)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kubellm-operator", description=__doc__)
    parser.add_argument("--version", action="version", version=f"kubellm-operator {__version__}")
    add_arguments(parser)
    return run(parser.parse_args(argv))
