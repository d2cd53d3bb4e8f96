"""The figures of multi_gpu.py per configuration, as JSON and a short markdown table.

Scaling efficiency = output tok/s / (GPUs x TP=1 output tok/s). Collective times are
means over ranks of ms per timed step (comm_timing.py: the compute stream's wait, so
send/recv includes waiting for the other pipeline stage)."""
from __future__ import annotations

import json
from pathlib import Path

KINDS = ("all_reduce", "all_gather", "send_recv")
COLUMNS = ("config", "GPUs", "vs TP=1 (top-5)", "output tok/s", "efficiency", "step ms",
           "all-reduce ms/step", "all-gather ms/step", "send/recv ms/step", "wall s")


def summarize(result: dict) -> None:
    """result["rows"][name]: the table's figures of each configuration that ran."""
    configs = result["configs"]
    base = configs.get("tp1", {}).get("w", {}).get("output_tok_s")
    result["rows"] = {name: _row(res, base) for name, res in configs.items()}
    eager = configs.get("tp1-eager", {}).get("w", {}).get("output_tok_s")
    if eager:  # against TP=1 without graphs and async scheduling (JSON only)
        for name, row in result["rows"].items():
            row["efficiency_vs_tp1_eager"] = _row(configs[name], eager)["efficiency"]


def _row(res: dict, base: float | None) -> dict:
    gpus = res["config"]["tp"] * res["config"]["pp"]
    agree = res.get("agreement")
    w = res.get("w") or {}
    comm = _mean_over_ranks(w.get("comm_by_rank"))
    applies = {"all_reduce": res["config"]["tp"] > 1, "all_gather": res["config"]["tp"] > 1,
               "send_recv": res["config"]["pp"] > 1}
    comm = {k: v for k, v in comm.items() if applies[k]}  # a kind the layout never runs
    same_model = res["config"]["model"] == "8b"   # tp1's model: a 70B cannot run on one GPU
    efficiency = round(w["output_tok_s"] / (gpus * base), 3) if w and base and same_model \
        else None
    is_failure = "error" in res or (agree is not None and agree["top5_agree"] is False)
    row = {"gpus": gpus, "agreement": _agreement_text(res, agree),
           "output_tok_s": w.get("output_tok_s"), "efficiency": efficiency,
           "step_ms": w.get("step_ms"), **{f"{k}_ms": comm.get(k) for k in KINDS},
           "wall_s": res.get("wall_s"), "is_failure": is_failure}
    row["line"] = (f"ERROR {res['error']}" if "error" in res else
                   f"{row['agreement']}; {row['output_tok_s']} output tok/s, efficiency "
                   f"{efficiency}, step {row['step_ms']} ms, all-reduce "
                   f"{row['all_reduce_ms']} / send-recv {row['send_recv_ms']} ms per step; "
                   f"{row['wall_s']} s")
    return row


def _agreement_text(res: dict, agree: dict | None) -> str:
    if "error" in res:
        return "error"
    if agree is None:
        return "reference" if "check" in res else "-"
    if agree["top5_agree"] is None:
        return "no reference"
    verdict = "agree" if agree["top5_agree"] else "DISAGREE"
    return f"{verdict} ({agree['identical']}/{agree['num_prompts']} identical)"


def _mean_over_ranks(ranks: list[dict] | None) -> dict:
    if not ranks:
        return {}
    means = {}
    for kind in KINDS:
        values = [r[kind] for r in ranks if r.get(kind) is not None]
        means[kind] = round(sum(values) / len(values), 3) if values else None
    return means


def markdown(result: dict) -> str:
    device = result.get("device") or "GPU"
    lines = [f"{result['visible_gpus']} x {device} visible; collectives timed every "
             f"{result['timing_every']} steps; every engine runs with CUDA graphs and async "
             "scheduling (tp1-eager: TP=1 without either).", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for name, row in result["rows"].items():
        cells = [name, row["gpus"], row["agreement"], row["output_tok_s"], row["efficiency"],
                 row["step_ms"], row["all_reduce_ms"], row["all_gather_ms"],
                 row["send_recv_ms"], row["wall_s"]]
        lines.append("| " + " | ".join("-" if c is None else str(c) for c in cells) + " |")
    lines += [f"- skipped {name}: {why}" for name, why in result["skipped"].items()]
    failures = [f"- {name}: {f}" for name, res in result["configs"].items()
                for f in (res.get("agreement") or {}).get("failures", [])[:3]]
    return "\n".join(lines + failures) + "\n"


def write_report(result: dict, out: Path) -> str:
    (out / "multi_gpu.json").write_text(json.dumps(result, indent=1))
    text = markdown(result)
    (out / "multi_gpu.md").write_text(text)
    return text
