"""Tensor and pipeline parallel on the visible GPUs: correctness against TP=1, workload W
throughput and scaling, and the time each step spends in collectives.

    python -m benchmarks.gpu.multi_gpu --out DIR [--configs tp1,tp2,...] [--budget-s S]
    python -m benchmarks.gpu.multi_gpu --smoke --out DIR  # the same path on CPU (gloo),
                                     # a tiny model, 2 "GPUs": catches script errors

All configurations use load_format=dummy: every checkpoint tensor is drawn whole from a
seed of its name and sliced by the loading path, so each TP rank and PP stage holds its
part of exactly the weights TP=1 holds (tests/distributed checks that on CPU). Each
layout's greedy tokens must agree with TP=1's by the top-5 rule (tests/gpu/agreement.py);
the Llama-3-70B shape runs W only, at TP=8. Each configuration runs in its own process
(multi_gpu_job.py) and the results are rewritten after each one, so a run cut short
keeps what it finished. Collective times come from KUBELLM_COMM_TIMING (comm_timing.py).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks.common.agreement import first_disagreement
from benchmarks.common.shapes import LLAMA3_8B, write_config
from benchmarks.gpu import workload_w
from benchmarks.gpu.multi_gpu_report import summarize, write_report

HERE = Path(__file__).resolve().parent

LLAMA3_70B = {**LLAMA3_8B, "hidden_size": 8192, "intermediate_size": 28672,
              "num_hidden_layers": 80, "num_attention_heads": 64}
MIN_CONFIG_S = 60     # with less of --budget-s left, a configuration is not started


@dataclass(frozen=True)
class Config:
    name: str
    tp: int
    pp: int
    model: str = "8b"        # "8b" or "70b" (Llama-3 shapes, dummy weights)
    check: bool = True       # greedy top-5 agreement against tp1
    bench: bool = True       # workload W
    eager: bool = False      # no CUDA graphs, no async scheduling

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp


def plan(smoke: bool) -> list[Config]:
    """Every configuration, tp1 first (the reference). In smoke mode the 70B path
    (dummy weights, W only) runs a tiny shape at TP=2."""
    big = Config("70b-tp2", 2, 1, "70b", check=False) if smoke else \
        Config("70b-tp8", 8, 1, "70b", check=False)
    return [Config("tp1", 1, 1), Config("tp2", 2, 1), Config("tp4", 4, 1),
            Config("tp8", 8, 1), Config("pp2", 1, 2), Config("tp4pp2", 4, 2, bench=False),
            big, Config("tp1-eager", 1, 1, check=False, eager=True)]


OPT_IN = {"tp1-eager"}  # TP=1 without graphs and async scheduling: one more run


def engine_kwargs(cfg: Config, smoke: bool) -> dict:
    common = dict(tensor_parallel_size=cfg.tp, pipeline_parallel_size=cfg.pp,
                  load_format="dummy",
                  enforce_eager=cfg.eager, async_scheduling=not cfg.eager,
                  skip_tokenizer_init=True, max_num_seqs=256,
                  max_num_batched_tokens=8192)
    if smoke:
        return {**common, "device": "cpu", "dtype": "float32", "max_model_len": 256,
                "cpu_kv_cache_gb": 0.05}
    # W needs 1024 + 256 tokens; the KV pool is sized from memory either way
    return {**common, "device": "cuda", "dtype": "bfloat16", "max_model_len": 2048,
            "gpu_memory_utilization": 0.9}


def make_model(kind: str, smoke: bool, work: Path) -> str:
    if kind == "70b":
        return write_config(workload_w.SMOKE_SHAPE if smoke else LLAMA3_70B, work / "70b")
    if smoke:
        from benchmarks.common.tiny_models import write_tiny_model
        return write_tiny_model("llama-4layers", work / "tiny", str(_empty_dir(work)))
    return write_config(LLAMA3_8B, work / "llama3-8b")


def _empty_dir(work: Path) -> Path:
    """A tokenizer folder with nothing in it: every run passes token ids."""
    (work / "no-tokenizer").mkdir(parents=True, exist_ok=True)
    return work / "no-tokenizer"


def w_prompts(smoke: bool) -> tuple[list[list[int]], int]:
    if smoke:  # workload_w.py's own smoke sizes
        workload_w.NUM_REQUESTS, workload_w.LOW, workload_w.HIGH = 8, 8, 40
        workload_w.OUTPUT_LEN, workload_w.SHAPE = 6, workload_w.SMOKE_SHAPE
    return workload_w.workload(), workload_w.OUTPUT_LEN


def check_prompts(smoke: bool) -> list[list[int]]:
    rng = random.Random(0)   # as tests/gpu: varied lengths, ids inside every vocab here
    return [[rng.randrange(1000, 40000) for _ in range(rng.randint(5, 40 if smoke else 300))]
            for _ in range(4 if smoke else 12)]


def run_job(cfg: Config, job: dict, work: Path, out: Path, timeout_s: float) -> dict:
    """One configuration in its own process group (its workers die with it on timeout)."""
    job_path, result_path = work / f"{cfg.name}.job.json", work / f"{cfg.name}.result.json"
    job_path.write_text(json.dumps(job))
    result_path.unlink(missing_ok=True)
    log = out / f"multi_gpu_{cfg.name}.log"
    env = {**os.environ, "KUBELLM_DIST_TIMEOUT_S": str(int(timeout_s))}
    with open(log, "w") as fh:
        proc = subprocess.Popen([sys.executable, str(HERE / "multi_gpu_job.py"), str(job_path),
                                 str(result_path)], stdout=fh, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)
        try:
            code = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = f"a timeout after {timeout_s:.0f} s"
    if code != 0:
        return {"error": f"exited with {code}", "log_tail": log.read_text()[-3000:]}
    return json.loads(result_path.read_text())


def agreement(name: str, mine: dict, ref: dict) -> dict:
    """The top-5 rule, prompt by prompt, against tp1's greedy run."""
    failures, identical = [], 0
    for i, (a, top_a, b, top_b) in enumerate(zip(mine["token_ids"], mine["top5"],
                                                 ref["token_ids"], ref["top5"])):
        msg = first_disagreement(a, top_a, b, top_b, names=(name, "tp1"))
        if msg:
            failures.append(f"prompt {i}: {msg}")
        identical += a == b
    return {"top5_agree": not failures, "identical": identical,
            "num_prompts": len(ref["token_ids"]), "failures": failures}


def skip_reason(cfg: Config, gpus: int, done: dict, left_s: float | None) -> str | None:
    if cfg.num_gpus > gpus:
        plural = "s" if cfg.num_gpus > 1 else ""
        return f"needs {cfg.num_gpus} GPU{plural} (TP {cfg.tp} x PP {cfg.pp}), {gpus} visible"
    if left_s is not None and left_s < MIN_CONFIG_S:
        return f"--budget-s spent ({left_s:.0f} s left, a run needs ~{MIN_CONFIG_S} s)"
    if cfg.check and not cfg.bench and "check" not in done.get("tp1", {}):
        return "correctness only, and tp1 (the reference) did not run"
    return None


class Session:
    """One invocation: the models written so far, the prompts, the time budget."""

    def __init__(self, args, out: Path, work: Path):
        self.args, self.out, self.work = args, out, work
        self.started = time.monotonic()
        self.models: dict[str, str] = {}
        self.w_prompts, self.output_len = w_prompts(args.smoke)
        self.check_prompts = check_prompts(args.smoke)
        self.timing_every = args.timing_every or (1 if args.smoke else 4)

    def left_s(self) -> float | None:
        if self.args.budget_s is None:
            return None
        return self.args.budget_s - (time.monotonic() - self.started)

    def run(self, cfg: Config) -> dict:
        t0 = time.monotonic()
        try:
            if cfg.model not in self.models:
                self.models[cfg.model] = make_model(cfg.model, self.args.smoke, self.work)
        except (OSError, subprocess.CalledProcessError) as exc:  # e.g. the disk is full
            res = {"error": f"could not write the {cfg.model} model: {exc}"}
        else:
            job = {"model": self.models[cfg.model],
                   "engine": engine_kwargs(cfg, self.args.smoke),
                   "check_prompts": self.check_prompts if cfg.check else None,
                   "w_prompts": self.w_prompts if cfg.bench else None,
                   "output_len": self.output_len, "timing_every": self.timing_every}
            left = self.left_s()
            timeout = self.args.config_timeout_s if left is None else \
                max(1.0, min(self.args.config_timeout_s, left))
            res = run_job(cfg, job, self.work, self.out, timeout)
        return {"config": asdict(cfg), **res, "wall_s": round(time.monotonic() - t0, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--smoke", action="store_true", help="CPU, gloo, tiny model, 2 ranks")
    ap.add_argument("--configs", help="comma-separated names (default: all but "
                                      f"{', '.join(sorted(OPT_IN))}); see plan()")
    ap.add_argument("--budget-s", type=float, help="start no configuration past this")
    ap.add_argument("--config-timeout-s", type=float, default=480)
    ap.add_argument("--timing-every", type=int, default=None,
                    help="time collectives every N-th step (default 4; smoke 1)")
    ap.add_argument("--work", help="scratch folder (model configs, job files)")
    args = ap.parse_args()
    configs = plan(args.smoke)
    names = {c.name for c in configs}
    wanted = args.configs.split(",") if args.configs else sorted(names - OPT_IN)
    if set(wanted) - names:
        ap.error(f"unknown --configs {sorted(set(wanted) - names)}; known: {sorted(names)}")
    out = Path(args.out)
    work = Path(args.work or Path(tempfile.gettempdir()) / "kubellm-multi-gpu")
    for folder in (out, work):
        folder.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off here
    if args.smoke:
        os.environ["KUBELLM_DEVICE"] = "cpu"
        # each rank's torch would take every core: ranks on few cores then spin against
        # each other (10-50x slower steps on 2 cores)
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch
    gpus = 2 if args.smoke else torch.cuda.device_count()
    session = Session(args, out, work)
    result = {"smoke": args.smoke, "visible_gpus": gpus, "torch": torch.__version__,
              "timing_every": session.timing_every, "configs": {}, "skipped": {}}
    for cfg in (c for c in configs if c.name in wanted):
        reason = skip_reason(cfg, gpus, result["configs"], session.left_s())
        if reason:
            result["skipped"][cfg.name] = reason
            print(f"{cfg.name}: skipped: {reason}", flush=True)
            continue
        res = session.run(cfg)
        ref = result["configs"].get("tp1", {}).get("check")
        if "check" in res and cfg.name != "tp1":
            res["agreement"] = agreement(cfg.name, res["check"], ref) if ref else \
                {"top5_agree": None, "failures": ["tp1 (the reference) has no result"]}
        result["configs"][cfg.name] = res
        result["device"] = result.get("device") or res.get("device")
        summarize(result)
        write_report(result, out)
        print(f"{cfg.name}: {result['rows'][cfg.name]['line']}", flush=True)
    summarize(result)
    print(write_report(result, out))
    bad = [n for n, r in result["rows"].items() if r["is_failure"]]
    if bad:
        print(f"FAILED: {', '.join(bad)}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
