"""Issue 14's targets for the server against the engine in process, measured in one run
(``kubellm bench serve --launch --compare-in-process --workloads ...``): per
(requests, rate), the least output tok/s ratio and the most TTFT / TPOT p50 added."""
from __future__ import annotations

import statistics

# (requests, rate): (least output tok/s ratio, most TTFT p50 ms added, most TPOT p50 ms added)
TARGETS = {
    (512, "inf"): (0.95, 100.0, 0.5),
    (512, 64.0): (0.95, 100.0, 0.5),
    (64, "inf"): (0.97, 10.0, None),
    (64, 16.0): (None, None, 0.2),
}


FIGURES = ("tpot_p50_ms", "tpot_mean_ms", "itl_p50_ms", "ttft_p50_ms", "output_tok_s_ratio")


def median_overhead(per_repeat: list[dict]) -> list[dict]:
    """One row per workload from its repeats' rows (serve.py http_overhead): the median
    of each figure, with every repeat's value beside it (``<figure>_each``)."""
    groups: dict[tuple, list[dict]] = {}
    for row in per_repeat:
        groups.setdefault((row["num_requests"], row["request_rate"]), []).append(row)
    out = []
    for (num, rate), rows in groups.items():
        merged = {"num_requests": num, "request_rate": rate, "repeats": len(rows)}
        for figure in FIGURES:
            values = [r[figure] for r in rows]
            merged[figure] = round(statistics.median(values), 3)
            merged[f"{figure}_each"] = values
        out.append(merged)
    return out


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
