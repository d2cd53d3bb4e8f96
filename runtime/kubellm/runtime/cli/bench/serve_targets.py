"""Issue 14's targets for the server against the engine in process, measured in one run
(``kubellm bench serve --launch --compare-in-process --workloads ...``): per
(requests, rate), the least output tok/s ratio and the most TTFT / TPOT p50 added."""
from __future__ import annotations

# (requests, rate): (least output tok/s ratio, most TTFT p50 ms added, most TPOT p50 ms added)
TARGETS = {
    (512, "inf"): (0.95, 100.0, 0.5),
    (512, 64.0): (0.95, 100.0, 0.5),
    (64, "inf"): (0.97, 10.0, None),
    (64, 16.0): (None, None, 0.2),
}


def check_targets(overhead_rows: list[dict]) -> list[dict]:
    """One row per target that the run measured: name, measured, want, met."""
    out = []
    for row in overhead_rows:
        key = (row["num_requests"], row["request_rate"])
        if key not in TARGETS:
            continue
        ratio, ttft, tpot = TARGETS[key]
        name = f"{key[0]} requests at {key[1]} req/s"
        checks = [("output tok/s ratio", row["output_tok_s_ratio"], ratio, ">="),
                  ("TTFT p50 added ms", row["ttft_p50_ms"], ttft, "<="),
                  ("TPOT p50 added ms", row["tpot_p50_ms"], tpot, "<=")]
        for what, measured, bound, op in checks:
            if bound is None:
                continue
            met = measured >= bound if op == ">=" else measured <= bound
            out.append({"name": f"{name}, {what}", "measured": measured,
                        "want": f"{op} {bound}", "met": met})
    return out
