"""``kubellm bench throughput|serve``: offline throughput and online serving benchmarks.
Plots are drawn by benchmarks/, not here."""
from __future__ import annotations


def register(subparsers) -> None:
    p = subparsers.add_parser("bench", help="benchmarks")
    sub = p.add_subparsers(dest="bench", metavar="BENCH", required=True)
    from kubellm.runtime.cli.bench.throughput import add_throughput_args, run_throughput
    t = sub.add_parser("throughput", help="offline throughput (optionally vs transformers)")
    add_throughput_args(t)
    t.set_defaults(func=run_throughput)
    from kubellm.runtime.cli.bench.serve import add_serve_args, run_serve_bench
    s = sub.add_parser("serve", help="online latency/throughput against a running server")
    add_serve_args(s)
    s.set_defaults(func=run_serve_bench)
