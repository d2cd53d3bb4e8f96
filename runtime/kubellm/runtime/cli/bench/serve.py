"""``kubellm bench serve``: online serving latency under Poisson arrivals.

Random-token prompts of ``--input-len`` tokens ask for exactly ``--output-len`` tokens
(EOS ignored) at each ``--request-rates`` value (``inf``: all at once). Reports TTFT, TPOT
(= (latency - TTFT) / (output tokens - 1)), inter-token latency (gaps between streamed
chunks) and end-to-end latency as mean/p50/p90/p99 in ms, and output tok/s; writes JSON
and a PNG of latency against request rate.

``--workloads 64@16,512@inf`` runs several (requests, rate) pairs instead of one
``--num-prompts`` at every rate; the issue-14 targets for HTTP against in process are
checked per pair (serve_targets.py) and printed. ``--repeats R`` runs the pairs R times
over (in cycles, each time on prompts of its own) and checks the targets on the median
of the R HTTP-minus-in-process differences: on the H200 one load's TTFT or TPOT moved
by 20 ms / 0.5 ms between runs of the same code, from where arrivals fell against steps.

Backends, one or both in one run:
- HTTP: ``--url`` of a running server, or ``--launch`` to start ``kubellm serve`` with the
  engine flags given here (stopped with SIGTERM after the HTTP runs);
- in process (``--compare-in-process``): the same schedule through AsyncLLMEngine with no
  HTTP, after the launched server has exited; the difference of the two per-token
  latencies is the HTTP layer's overhead per token.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time

from kubellm.runtime.cli.bench.sending import Sample, send_at
from kubellm.runtime.cli.engine_args import add_engine_args, engine_config_from_args


def add_serve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", default=None, help="base URL of a running server "
                                               "(default with --launch: the launched one)")
    p.add_argument("--launch", action="store_true",
                   help="start `kubellm serve` with the engine flags below, then stop it")
    p.add_argument("--compare-in-process", action="store_true",
                   help="also run the schedule through the engine in this process (no HTTP)")
    p.add_argument("--model", default=None, help="model directory (--launch / in-process)")
    p.add_argument("--api-key", default=os.environ.get("KUBELLM_API_KEY") or None)
    p.add_argument("--request-rates", default="2,8,32,inf",
                   help="comma-separated requests/s; inf sends all at once")
    p.add_argument("--num-prompts", type=int, default=128, help="requests per rate")
    p.add_argument("--workloads", default=None,
                   help="comma-separated REQUESTS@RATE pairs (e.g. 64@16,512@inf); "
                        "replaces --request-rates and --num-prompts")
    p.add_argument("--repeats", type=int, default=1,
                   help="run the workloads this many times over (cycles, fresh prompts "
                        "each time); the targets use the median per workload")
    p.add_argument("--http-client", choices=["aiohttp", "httpx"], default="aiohttp",
                   help="the benchmark's HTTP client (its CPU share per load is reported: "
                        "near 1.0 the client, not the server, set the pace)")
    p.add_argument("--client-processes", type=int, default=1,
                   help="spread the HTTP client over this many processes, request i sent "
                        "by process i %% N, all from one start (client_procs.py: one "
                        "process sends a burst one request after another)")
    p.add_argument("--api-server-count", type=int, default=1,
                   help="API server processes of the launched server")
    p.add_argument("--profile-dir", default=None,
                   help="write stack-sample profiles of every server process (and of the "
                        "in-process run) here (KUBELLM_PROFILE_DIR)")
    p.add_argument("--trace-dir", default=None,
                   help="write per-request arrival traces of the client, every API server "
                        "and the engine core here (KUBELLM_TRACE_DIR; read them with "
                        "python -m benchmarks.serving.arrival_trace DIR)")
    p.add_argument("--input-len", type=int, default=512)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--prompt-vocab", type=int, default=32000,
                   help="prompt token ids are drawn below this (keep it within the tokenizer)")
    p.add_argument("--dataset-seed", type=int, default=0)
    p.add_argument("--out", default=None, help="directory for serve_bench.json and the PNG")
    p.add_argument("--ready-timeout", type=float, default=900.0,
                   help="seconds to wait for a launched server's /ready")
    add_engine_args(p)


# ---- workload ------------------------------------------------------------------------
def split_prompts(prompts: list, workloads: list) -> tuple[list, list[list]]:
    """The warm-up's WARM_UP_PROMPTS prompts, then each load's own: no load reuses a
    prompt another sent, so none is served from the prefix cache (with one list for all,
    every load after the first replayed cached prompts)."""
    warm, at, loads = prompts[:WARM_UP_PROMPTS], WARM_UP_PROMPTS, []
    for num, _ in workloads:
        loads.append(prompts[at:at + num])
        at += num
    return warm, loads


def make_workload(args) -> list[list[int]]:
    rng = random.Random(args.dataset_seed)
    # stay clear of the special tokens at the low end of typical vocabularies
    return [[rng.randrange(16, args.prompt_vocab) for _ in range(args.input_len)]
            for _ in range(args.num_prompts)]


def arrival_offsets(num: int, rate: float, seed: int) -> list[float]:
    """Poisson process: exponential gaps of mean 1/rate seconds (all zero for inf)."""
    if math.isinf(rate):
        return [0.0] * num
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(num):
        out.append(t)
        t += rng.expovariate(rate)
    return out


# ---- HTTP backend --------------------------------------------------------------------
def client_args(url: str, args, model: str, max_connections: int) -> tuple:
    """PooledClient's arguments before ``new_sample`` (client processes build their own)."""
    return url, args.api_key, args.http_client, max_connections, args.output_len, model


def http_client(url: str, args, model: str, max_connections: int):
    from kubellm.runtime.cli.bench.http_client import PooledClient
    return PooledClient(*client_args(url, args, model, max_connections), Sample)


def http_row(samples, wall: float, rate: float, client_cpu_fraction: float) -> dict:
    """A load's figures over HTTP, printed; ``client_cpu_fraction``: the client's CPU
    seconds over the load's seconds, per client process."""
    row = summarize(samples, wall, rate)
    row["client_cpu_fraction"] = round(client_cpu_fraction, 3)
    _print_row("http", row)
    return row


# Connections opened before a load are those its first requests reuse; one that waits
# idle past the server's keep-alive timeout (uvicorn: 5 s) can be closed by the server as
# the client sends on it (H200 call 7, 512 requests at 64 req/s: one request failed with
# ServerDisconnectedError). So only requests due within this many seconds get one.
PRE_OPEN_WITHIN_S = 2.0


def connections_to_open(num: int, rate: float, seed: int) -> int:
    return sum(1 for t in arrival_offsets(num, rate, seed) if t < PRE_OPEN_WITHIN_S)


async def run_http_loads(url: str, warm, loads, workloads, args, model: str,
                         client_trace=None) -> list[dict]:
    """The warm-up, then each load over one pool of connections (http_client.py says why)
    in one event loop; a row of figures per load."""
    biggest = max([len(warm)] + [len(load) for load in loads])
    async with http_client(url, args, model, biggest + 8) as client:
        await _warm_up(client.complete, warm, args.dataset_seed)
        rows = []
        for (num, rate), load in zip(workloads, loads):
            bodies = [client.encode(prompt) for prompt in load]
            await client.open_connections(connections_to_open(num, rate, args.dataset_seed))
            if client_trace is not None:
                client_trace.mark("burst", f"{num}@{rate}")
            start, cpu = time.perf_counter(), time.process_time()
            samples = await _schedule(bodies, rate, args.dataset_seed, client.complete)
            wall = time.perf_counter() - start
            rows.append(http_row(samples, wall, rate, (time.process_time() - cpu) / wall))
        return rows

def run_http_loads_spread(url: str, warm, loads, workloads, args, model: str,
                          client_trace=None) -> list[dict]:
    """run_http_loads with the client spread over ``args.client_processes`` processes
    (client_procs.py); the warm-up is two loads of its own, untimed."""
    from kubellm.runtime.cli.bench.client_procs import ClientProcesses
    from kubellm.runtime.cli.bench.http_client import PooledClient
    biggest = max([len(warm)] + [len(load) for load in loads])
    spread_args = client_args(url, args, model, biggest + 8)
    encoder = PooledClient(*spread_args, Sample)
    with ClientProcesses(args.client_processes, spread_args) as pool:
        for num, rate in WARM_UP_LOADS:
            offsets = arrival_offsets(num, rate, args.dataset_seed)
            pool.run([encoder.encode(p) for p in warm[:num]], offsets, num)
        rows = []
        for (num, rate), load in zip(workloads, loads):
            bodies = [encoder.encode(prompt) for prompt in load]
            offsets = arrival_offsets(num, rate, args.dataset_seed)
            mark = None
            if client_trace is not None:
                def mark(start, label=f"{num}@{rate}"):
                    client_trace.mark("burst", label, at=start)
            samples, wall, cpu = pool.run(
                bodies, offsets, connections_to_open(num, rate, args.dataset_seed), mark)
            rows.append(http_row(samples, wall, rate, cpu / wall / args.client_processes))
        return rows


# ---- in-process backend --------------------------------------------------------------
async def inproc_request(async_engine, prompt, args, request_id: str) -> Sample:
    from kubellm.runtime.core.sampling_params import SamplingParams
    params = SamplingParams(max_tokens=args.output_len, ignore_eos=True, temperature=0.0)
    s, start = Sample(), time.perf_counter()
    last, num_tokens = start, 0
    stream = await async_engine.add_request(request_id, prompt, params)
    try:
        async for out in stream:
            now = time.perf_counter()
            tokens = len(out.outputs[0].token_ids)
            if tokens > num_tokens:
                if s.ttft is None:
                    s.ttft = now - start
                else:
                    s.gaps.append(now - last)
                last, num_tokens = now, tokens
    finally:
        stream.close()
    s.latency, s.num_output_tokens = last - start, num_tokens
    return s


# ---- shared --------------------------------------------------------------------------
async def _schedule(prompts, rate, seed, send) -> list[Sample]:
    return await send_at(prompts, arrival_offsets(len(prompts), rate, seed),
                         time.monotonic(), send)


WARM_UP_RATE = 16.0
# (requests, rate) of the warm-up's loads: a burst, then arrivals one by one
WARM_UP_LOADS = ((4, math.inf), (16, WARM_UP_RATE))
WARM_UP_PROMPTS = max(num for num, _ in WARM_UP_LOADS)


async def _warm_up(send, prompts, seed: int = 0) -> None:
    """Before anything is timed: a burst (batched prefills), then requests arriving one
    by one (single prefills mixed into decode steps), so that each step shape a load
    starts with has compiled. Measured on the H200: with the burst alone, the first
    timed load over HTTP (64 requests at 16 req/s) had a 5.35 s TTFT p50, and 88 ms when
    repeated; whichever backend ran first paid the kernels' first compiles."""
    for num, rate in WARM_UP_LOADS:
        await _schedule(prompts[:num], rate, seed, send)


def _stats_ms(values: list[float]) -> dict:
    if not values:
        return {}
    xs = sorted(values)

    def pct(q):
        return round(1000 * xs[min(len(xs) - 1, int(q * len(xs)))], 3)
    return {"mean": round(1000 * sum(xs) / len(xs), 3), "p50": pct(0.5), "p90": pct(0.9),
            "p99": pct(0.99)}


def summarize(samples: list[Sample], wall_s: float, rate: float) -> dict:
    ok = [s for s in samples if s.error is None and s.ttft is not None]
    tpot = [(s.latency - s.ttft) / (s.num_output_tokens - 1)
            for s in ok if s.num_output_tokens > 1]
    num_out = sum(s.num_output_tokens for s in ok)
    return {"request_rate": "inf" if math.isinf(rate) else rate,
            "num_requests": len(samples), "num_failed": len(samples) - len(ok),
            "errors": sorted({s.error for s in samples if s.error})[:3],
            "wall_s": round(wall_s, 3), "output_tokens": num_out,
            "output_tok_s": round(num_out / wall_s, 1) if wall_s else None,
            "ttft_ms": _stats_ms([s.ttft for s in ok]), "tpot_ms": _stats_ms(tpot),
            "itl_ms": _stats_ms([g for s in ok for g in s.gaps]),
            "e2e_ms": _stats_ms([s.latency for s in ok])}


def _parse_workloads(args) -> list[tuple[int, float]]:
    if not args.workloads:
        return [(args.num_prompts, rate) for rate in _parse_rates(args.request_rates)]
    pairs = []
    for item in args.workloads.split(","):
        count, _, rate = item.strip().partition("@")
        try:
            pairs.append((int(count), float(rate)))
        except ValueError:
            raise SystemExit(f"kubellm: error: --workloads: expected REQUESTS@RATE, got "
                             f"{item!r}") from None
        if pairs[-1][0] < 1 or pairs[-1][1] <= 0:
            raise SystemExit(f"kubellm: error: --workloads: {item!r} must be positive")
    return pairs


def _parse_rates(text: str) -> list[float]:
    try:
        rates = [float(r) for r in text.split(",") if r.strip()]
    except ValueError:
        raise SystemExit(f"kubellm: error: --request-rates: not numbers: {text!r}") from None
    if not rates or any(r <= 0 for r in rates):
        raise SystemExit("kubellm: error: --request-rates must be positive (or inf)")
    return rates


# ---- launching a server --------------------------------------------------------------
class LaunchedServer:
    def __init__(self, config, ready_timeout: float, api_server_count: int = 1,
                 profile_dir: str | None = None, trace_dir: str | None = None):
        import yaml
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        fields = {k: v for k, v in dataclasses.asdict(config).items() if v is not None}
        self.config_file = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
        yaml.safe_dump(fields, self.config_file)
        self.config_file.close()
        cmd = [sys.executable, "-m", "kubellm.runtime", "serve", "--config", self.config_file.name,
               "--host", "127.0.0.1", "--port", str(self.port),
               "--uvicorn-log-level", "warning", "--api-server-count", str(api_server_count)]
        env = dict(os.environ)
        if profile_dir:
            env["KUBELLM_PROFILE_DIR"] = os.path.abspath(profile_dir)
        if trace_dir:
            env["KUBELLM_TRACE_DIR"] = os.path.abspath(trace_dir)
        self.proc = subprocess.Popen(cmd, env=env)
        self._wait_ready(ready_timeout)

    def _wait_ready(self, timeout: float) -> None:
        import httpx
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"kubellm: error: the server exited with {self.proc.returncode}")
            try:
                if httpx.get(self.url + "/ready", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        self.stop()
        raise SystemExit("kubellm: error: the server never became ready")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(120)
        os.unlink(self.config_file.name)
        return code


def _served_model(url: str, api_key: str | None) -> str:
    import httpx
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return httpx.get(url + "/v1/models", headers=headers, timeout=30).json()["data"][0]["id"]


def run_serve_bench(args: argparse.Namespace) -> int:
    from kubellm.runtime.cli.bench.serve_targets import check_targets, median_overhead
    if args.repeats < 1:
        raise SystemExit(f"kubellm: error: --repeats must be at least 1, got {args.repeats}")
    distinct = _parse_workloads(args)
    workloads = distinct * args.repeats
    if not args.url and not args.launch and not args.compare_in_process:
        raise SystemExit("kubellm: error: give --url, --launch or --compare-in-process")
    if args.client_processes < 1:
        raise SystemExit(f"kubellm: error: --client-processes must be at least 1, got "
                         f"{args.client_processes}")
    config = engine_config_from_args(args, model=args.model)
    args.num_prompts = WARM_UP_PROMPTS + sum(n for n, _ in workloads)
    warm, loads = split_prompts(make_workload(args), workloads)
    result = {"workload": {"num_prompts": args.num_prompts, "input_len": args.input_len,
                           "output_len": args.output_len, "dataset_seed": args.dataset_seed,
                           "workloads": [[n, "inf" if math.isinf(r) else r]
                                         for n, r in distinct],
                           "repeats": args.repeats},
              "server": {"api_server_count": args.api_server_count},
              "http_client": args.http_client, "client_processes": args.client_processes,
              "engine": {k: v for k, v in dataclasses.asdict(config).items()
                         if v is not None}, "http": [], "in_process": []}
    server = (LaunchedServer(config, args.ready_timeout, args.api_server_count,
                             args.profile_dir, args.trace_dir) if args.launch else None)
    client_trace = None
    if args.trace_dir:
        from kubellm.runtime.engine_core.trace import Trace
        client_trace = Trace("client")
    try:
        url = args.url or (server.url if server else None)
        if url:
            model = _served_model(url, args.api_key)
            if args.client_processes > 1:
                result["http"] = run_http_loads_spread(url, warm, loads, workloads, args,
                                                       model, client_trace)
            else:
                result["http"] = asyncio.run(run_http_loads(url, warm, loads, workloads,
                                                            args, model, client_trace))
    finally:
        if server is not None:
            result["server_exit_code"] = server.stop()
        if client_trace is not None:
            client_trace.write(args.trace_dir)
    if args.compare_in_process:
        timed = asyncio.run(_timed_inproc(config, warm, loads, workloads, args))
        for (num, rate), (samples, wall) in zip(workloads, timed):
            result["in_process"].append(summarize(samples, wall, rate))
            _print_row("in-process", result["in_process"][-1])
    for backend in ("http", "in_process"):
        for i, row in enumerate(result[backend]):
            row["repeat"] = i // len(distinct)
    result["http_overhead_per_repeat"] = http_overhead(result["http"], result["in_process"])
    result["http_overhead"] = median_overhead(result["http_overhead_per_repeat"])
    for row in result["http_overhead"]:
        print(f"http vs in process, {row['num_requests']} requests at rate "
              f"{row['request_rate']}: output tok/s x{row['output_tok_s_ratio']}, TPOT p50 "
              f"{row['tpot_p50_ms']:+.3f} ms/token, TTFT p50 {row['ttft_p50_ms']:+.3f} ms"
              + (f" (median of {row['repeats']}: TTFT {row['ttft_p50_ms_each']}, TPOT "
                 f"{row['tpot_p50_ms_each']}, ratio {row['output_tok_s_ratio_each']})"
                 if row["repeats"] > 1 else ""))
    result["targets"] = check_targets(result["http_overhead"])
    for row in result["targets"]:
        print(f"target {row['name']}: {row['measured']} (want {row['want']}) -> "
              f"{'met' if row['met'] else 'NOT met'}")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "serve_bench.json"), "w") as fh:
            json.dump(result, fh, indent=2)
    print(json.dumps({"http": result["http"], "in_process": result["in_process"],
                      "http_overhead": result["http_overhead"]}))
    return 0


async def _timed_inproc(config, warm, loads, workloads, args) -> list:
    """Each workload through the engine in this process: (samples, wall seconds)."""
    from kubellm.runtime.engine.llm_engine import LLMEngine
    from kubellm.runtime.engine_core import profiler
    from kubellm.runtime.server.async_engine import AsyncLLMEngine

    if args.profile_dir:
        os.environ[profiler.ENV] = os.path.abspath(args.profile_dir)
        profiler.start_if_asked("in_process")
    engine = LLMEngine.from_config(config)
    # as the server's engine core does after startup (gc_heap.py): like against like
    from kubellm.runtime.core.gc_heap import freeze_startup_heap, thaw_startup_heap
    freeze_startup_heap()
    async_engine = AsyncLLMEngine(engine)
    async_engine.start()
    ids = iter(range(10**9))

    def send(p):
        return inproc_request(async_engine, p, args, f"b{next(ids)}")
    try:
        await _warm_up(send, warm, args.dataset_seed)
        out = []
        for (_, rate), load in zip(workloads, loads):
            start = time.perf_counter()
            samples = await _schedule(load, rate, args.dataset_seed, send)
            out.append((samples, time.perf_counter() - start))
        return out
    finally:
        async_engine.stop()
        thaw_startup_heap()   # as the core does before it exits


def http_overhead(http_rows: list[dict], inproc_rows: list[dict]) -> list[dict]:
    """Per load (workload and repeat): HTTP minus in-process latency (ms), the cost of the
    HTTP layer."""
    def key(row):
        return row["num_requests"], row["request_rate"], row.get("repeat", 0)
    by_workload = {key(row): row for row in inproc_rows}
    out = []
    for row in http_rows:
        base = by_workload.get(key(row))
        if not base or not row["tpot_ms"] or not base["tpot_ms"] or not base["output_tok_s"]:
            continue
        out.append({"num_requests": row["num_requests"], "request_rate": row["request_rate"],
                    "repeat": row.get("repeat", 0),
                    "tpot_p50_ms": round(row["tpot_ms"]["p50"] - base["tpot_ms"]["p50"], 3),
                    "tpot_mean_ms": round(row["tpot_ms"]["mean"] - base["tpot_ms"]["mean"], 3),
                    "itl_p50_ms": round(row["itl_ms"]["p50"] - base["itl_ms"]["p50"], 3),
                    "ttft_p50_ms": round(row["ttft_ms"]["p50"] - base["ttft_ms"]["p50"], 3),
                    "output_tok_s_ratio": round(row["output_tok_s"] / base["output_tok_s"], 3)})
    return out


def _print_row(backend: str, row: dict) -> None:
    print(f"[{backend}] {row['num_requests']} requests at rate {row['request_rate']}: "
          f"{row['output_tok_s']} output tok/s, "
          f"TTFT p50/p99 {row['ttft_ms'].get('p50')}/{row['ttft_ms'].get('p99')} ms, "
          f"TPOT p50/p99 {row['tpot_ms'].get('p50')}/{row['tpot_ms'].get('p99')} ms, "
          f"ITL p50/p99 {row['itl_ms'].get('p50')}/{row['itl_ms'].get('p99')} ms, "
          f"failed {row['num_failed']}"
          + (f", client CPU {row['client_cpu_fraction']:.2f} of the wall time"
             if "client_cpu_fraction" in row else ""), flush=True)
