"""Plot a `kubellm bench serve --out DIR` result: TTFT, TPOT and ITL against request rate.

    python -m benchmarks.serving.plot_serve DIR/serve_bench.json [OUT.png]

(The plot lives here, not in the runtime package, so the runtime ships no matplotlib use.)
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def plot(result: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    all_rates = [r["request_rate"] for b in ("http", "in_process") for r in result[b]]
    inf_x = max((x for x in all_rates if x != "inf"), default=1.0) * 2
    for backend, style in (("http", "-o"), ("in_process", "--s")):
        # one line per request count (--workloads may mix them)
        for num in sorted({r.get("num_requests") for r in result[backend]}, key=str):
            rows = [r for r in result[backend] if r.get("num_requests") == num]
            xs = [inf_x if r["request_rate"] == "inf" else r["request_rate"] for r in rows]
            for ax, key in zip(axes, ("ttft_ms", "tpot_ms", "itl_ms")):
                for q in ("p50", "p99"):
                    ax.plot(xs, [r[key].get(q) for r in rows], style,
                            label=f"{backend} {num} req {q}")
    for ax, key in zip(axes, ("ttft_ms", "tpot_ms", "itl_ms")):
        ax.set_title(key.replace("_ms", "").upper() + " (ms)")
        ax.set_xlabel("request rate (req/s; rightmost = all at once)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7)
    w = result["workload"]
    fig.suptitle(f"kubellm serving latency: {w['num_prompts']} requests/rate, "
                 f"{w['input_len']} in / {w['output_len']} out tokens")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str]) -> int:
    source = Path(argv[0])
    target = Path(argv[1]) if len(argv) > 1 else source.with_name("serve_latency_vs_rate.png")
    plot(json.loads(source.read_text()), str(target))
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
