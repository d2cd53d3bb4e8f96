"""Routing a shared-prefix workload over several replicas: round robin against an
Endpoint-Picker-style scorer, with the replicas' own scheduler and prefix cache.

    python -m benchmarks.routing.simulate [--out benchmarks/results/routing] [--smoke]

Each replica is kubellm's own scheduling core (kubellm.runtime.core: the Scheduler and
the KVCacheManager with automatic prefix caching; no tensors), stepped in simulated time
with a cost per step: STEP_BASE + PREFILL_PER_TOKEN x prefill tokens + DECODE_PER_SEQ x
decoding sequences (an 8B-class model on one GPU; the KV pool is scaled down with the
workload so that it fills and evicts). So a replica's queue depth, KV-cache use and
prefix hits are the scheduler's real numbers, not a formula.

The workload: Poisson arrivals; each prompt is one of NUM_PREFIXES shared prefixes
(system prompts, documents; Zipf popularity) and a per-request suffix; outputs of varied
length. The routers see what an Endpoint Picker sees, refreshed every METRICS_REFRESH
seconds (the EPP's 50 ms): each replica's vllm:num_requests_waiting and
vllm:kv_cache_usage_perc; the prefix scorer keeps its own index of which prompt blocks
it sent where (as the EPP's prefix-cache-scorer does, without asking the replica).

- round-robin: what a Service (kube-proxy) does, blind to all of it;
- load: queue-scorer (2) + kv-cache-utilization-scorer (2);
- epp: load + prefix-cache-scorer (3), the Endpoint Picker's default profile.

Reported per policy and request rate: TTFT p50/p90/p99, the prefix-cache hit rate
(prompt tokens found cached / looked up, over all replicas), throughput. A PNG plots
TTFT and hit rate against the rate; a JSON holds every figure.
"""
from __future__ import annotations

import argparse
import dataclasses
import heapq
import json
import math
import pathlib
import random
import sys
from collections import OrderedDict

from kubellm.runtime.core.kv_cache import KVCacheManager
from kubellm.runtime.core.request import Request
from kubellm.runtime.core.sampling_params import SamplingParams
from kubellm.runtime.core.scheduler import Scheduler

STEP_BASE = 0.005  # s per engine step (launch, sampling, host work)
PREFILL_PER_TOKEN = 40e-6  # s per prompt token computed (8B: ~16 GFLOP/token)
DECODE_PER_SEQ = 25e-6  # s per decoding sequence in a step (KV and weight reads)
METRICS_REFRESH = 0.05  # s between two scrapes of every replica (the EPP's default)
PREFIX_BLOCK = 64  # tokens per block of the prefix scorer's index
PREFIX_INDEX_BLOCKS = 31250  # its per-replica LRU capacity (the EPP's default)
WEIGHTS = {"queue": 2.0, "kv": 2.0, "prefix": 3.0}
POLICIES = ("round-robin", "load", "epp")


@dataclasses.dataclass(frozen=True)
class Workload:
    num_requests: int = 2000
    num_prefixes: int = 24
    prefix_tokens: int = 1536
    zipf: float = 1.1
    suffix_tokens: tuple[int, int] = (32, 256)
    output_tokens: tuple[int, int] = (32, 192)
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class Fleet:
    replicas: int = 4
    num_blocks: int = 1536  # KV blocks per replica (scaled with the workload)
    block_size: int = 16
    max_num_batched_tokens: int = 4096
    max_num_seqs: int = 128


@dataclasses.dataclass
class Arrival:
    time: float
    request_id: str
    prompt: list[int]
    output_tokens: int


def workload(spec: Workload, rate: float) -> list[Arrival]:
    rng = random.Random(spec.seed)
    prefixes = [[random.Random(spec.seed * 1000 + g).randrange(100, 50000)
                 for _ in range(spec.prefix_tokens)] for g in range(spec.num_prefixes)]
    popularity = [1.0 / (g + 1) ** spec.zipf for g in range(spec.num_prefixes)]
    arrivals, t = [], 0.0
    for i in range(spec.num_requests):
        t += rng.expovariate(rate)
        group = rng.choices(range(spec.num_prefixes), popularity)[0]
        suffix = [rng.randrange(100, 50000) for _ in range(rng.randint(*spec.suffix_tokens))]
        arrivals.append(Arrival(t, f"r{i}", prefixes[group] + suffix,
                                rng.randint(*spec.output_tokens)))
    return arrivals


class Replica:
    """kubellm's scheduler and KV-cache manager, stepped in simulated time."""

    def __init__(self, fleet: Fleet):
        self.kv = KVCacheManager(fleet.num_blocks, fleet.block_size,
                                 enable_prefix_caching=True)
        self.scheduler = Scheduler(self.kv, fleet.max_num_batched_tokens, fleet.max_num_seqs)
        self.busy = False

    @property
    def waiting(self) -> int:
        return len(self.scheduler.waiting)

    def step(self) -> tuple[float, object]:
        out = self.scheduler.schedule()
        decodes = [s for s in out.scheduled if s.num_new_tokens == 1
                   and s.start >= len(s.request.prompt_token_ids)]
        prefill = sum(s.num_new_tokens for s in out.scheduled) - len(decodes)
        decode = len(decodes)
        return STEP_BASE + PREFILL_PER_TOKEN * prefill + DECODE_PER_SEQ * decode, out

    def finish_step(self, out, now: float, first_token: dict[str, float]) -> None:
        sampled = {s.request.request_id: 7 for s in out.scheduled if s.samples}
        for request in self.scheduler.update(out, sampled):
            first_token.setdefault(request.request_id, now)
            if request.num_output_tokens >= request.max_tokens:
                self.scheduler.finish_request(request, "length")


class PrefixIndex:
    """The router's own memory of which prompt blocks it sent to which replica (an LRU of
    chained block hashes per replica), as the EPP's prefix-cache-scorer keeps it."""

    def __init__(self, replicas: int):
        self.lru = [OrderedDict() for _ in range(replicas)]

    @staticmethod
    def hashes(prompt: list[int]) -> list[int]:
        chained, out = 0, []
        for start in range(0, len(prompt) - PREFIX_BLOCK + 1, PREFIX_BLOCK):
            chained = hash((chained, tuple(prompt[start:start + PREFIX_BLOCK])))
            out.append(chained)
        return out

    def match(self, replica: int, hashes: list[int]) -> float:
        matched = 0
        for h in hashes:
            if h not in self.lru[replica]:
                break
            matched += 1
        return matched / len(hashes) if hashes else 0.0

    def record(self, replica: int, hashes: list[int]) -> None:
        lru = self.lru[replica]
        for h in hashes:
            lru[h] = True
            lru.move_to_end(h)
        while len(lru) > PREFIX_INDEX_BLOCKS:
            lru.popitem(last=False)


class Router:
    def __init__(self, policy: str, replicas: list[Replica], rng: random.Random):
        self.policy, self.replicas, self.rng = policy, replicas, rng
        self.turn = 0
        self.index = PrefixIndex(len(replicas))
        self.seen = [(0, 0.0)] * len(replicas)  # (waiting, kv usage) as last scraped
        self.scraped_at = -math.inf

    def scrape(self, now: float) -> None:
        if now - self.scraped_at >= METRICS_REFRESH:
            self.seen = [(r.waiting, r.kv.usage) for r in self.replicas]
            self.scraped_at = now

    def pick(self, prompt: list[int], now: float) -> int:
        if self.policy == "round-robin":
            self.turn += 1
            return self.turn % len(self.replicas)
        self.scrape(now)
        queues = [w for w, _ in self.seen]
        low, high = min(queues), max(queues)
        hashes = self.index.hashes(prompt) if self.policy == "epp" else []
        scores = []
        for i, (waiting, usage) in enumerate(self.seen):
            queue = 1.0 if high == low else (high - waiting) / (high - low)
            score = WEIGHTS["queue"] * queue + WEIGHTS["kv"] * (1.0 - usage)
            if self.policy == "epp":
                score += WEIGHTS["prefix"] * self.index.match(i, hashes)
            scores.append(score)
        best = max(scores)
        choice = self.rng.choice([i for i, s in enumerate(scores) if s >= best - 1e-12])
        if hashes:
            self.index.record(choice, hashes)
        return choice


def run(policy: str, rate: float, spec: Workload, fleet: Fleet) -> dict:
    replicas = [Replica(fleet) for _ in range(fleet.replicas)]
    router = Router(policy, replicas, random.Random(spec.seed + 1))
    arrivals = workload(spec, rate)
    events: list[tuple[float, int, str, int, object]] = []  # (time, order, kind, replica, x)
    order = 0
    for a in arrivals:
        events.append((a.time, order, "arrive", -1, a))
        order += 1
    heapq.heapify(events)
    first_token: dict[str, float] = {}
    now = 0.0
    while events:
        now, _, kind, index, payload = heapq.heappop(events)
        if kind == "arrive":
            index = router.pick(payload.prompt, now)
            request = Request(payload.request_id, payload.prompt,
                              SamplingParams(max_tokens=payload.output_tokens),
                              arrival_time=payload.time)
            request.max_tokens = payload.output_tokens
            replicas[index].scheduler.add_request(request)
        else:
            replicas[index].finish_step(payload, now, first_token)
            replicas[index].busy = False
        for i, replica in enumerate(replicas):
            if not replica.busy and replica.scheduler.has_unfinished():
                seconds, out = replica.step()
                replica.busy = True
                heapq.heappush(events, (now + seconds, order, "step", i, out))
                order += 1
    ttft = sorted(first_token[a.request_id] - a.time for a in arrivals)
    queries = sum(r.kv.prefix_queries for r in replicas)
    hits = sum(r.kv.prefix_hits for r in replicas)
    tokens = sum(a.output_tokens for a in arrivals)
    return {"policy": policy, "rate": rate, "requests": len(arrivals),
            "ttft_p50_ms": round(1000 * _pct(ttft, 50), 1),
            "ttft_p90_ms": round(1000 * _pct(ttft, 90), 1),
            "ttft_p99_ms": round(1000 * _pct(ttft, 99), 1),
            "prefix_hit_rate": round(hits / queries, 4) if queries else 0.0,
            "output_tok_s": round(tokens / now, 1) if now > 0 else 0.0,
            "makespan_s": round(now, 2)}


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    k = (len(values) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def plot(results: list[dict], path: pathlib.Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ttft_ax, hit_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    for policy, style, color in zip(POLICIES, ("o-", "s--", "^-"),
                                    ("tab:blue", "tab:orange", "tab:green")):
        rows = sorted((r for r in results if r["policy"] == policy), key=lambda r: r["rate"])
        rates = [r["rate"] for r in rows]
        ttft_ax.plot(rates, [r["ttft_p50_ms"] for r in rows], style, color=color,
                     label=f"{policy} p50")
        ttft_ax.plot(rates, [r["ttft_p90_ms"] for r in rows], style, color=color, alpha=0.35,
                     label=f"{policy} p90")
        hit_ax.plot(rates, [100 * r["prefix_hit_rate"] for r in rows], style, color=color,
                    label=policy)
    ttft_ax.set(xlabel="requests / s", ylabel="TTFT (ms)", yscale="log",
                title="Time to first token")
    hit_ax.set(xlabel="requests / s", ylabel="prompt tokens from the prefix cache (%)",
               title="Prefix-cache hit rate", ylim=(0, 100))
    ttft_ax.legend(fontsize=7)
    hit_ax.legend(fontsize=8)
    fig.suptitle("Routing over replicas of kubellm's scheduler: round robin vs an "
                 "Endpoint-Picker scorer", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="benchmarks/results/routing",
                        help="folder for routing_simulation.json and .png")
    parser.add_argument("--smoke", action="store_true",
                        help="a few requests at two rates (what CI runs)")
    parser.add_argument("--rates", type=float, nargs="*", default=None,
                        help="request rates to run (default 20 60 100 140; smoke 20 60)")
    args = parser.parse_args(argv)
    spec = Workload(num_requests=120) if args.smoke else Workload()
    rates = args.rates or ([20.0, 60.0] if args.smoke else [20.0, 60.0, 100.0, 140.0])
    if any(r <= 0 for r in rates):
        print("--rates: every rate must be > 0", file=sys.stderr)
        return 2
    fleet = Fleet()
    results = [run(policy, rate, spec, fleet) for rate in rates for policy in POLICIES]
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary = {"command": "python -m benchmarks.routing.simulate"
                          + (" --smoke" if args.smoke else ""),
               "workload": dataclasses.asdict(spec), "fleet": dataclasses.asdict(fleet),
               "cost_model": {"step_base_s": STEP_BASE, "prefill_per_token_s":
                              PREFILL_PER_TOKEN, "decode_per_seq_s": DECODE_PER_SEQ},
               "weights": WEIGHTS, "results": results}
    (out / "routing_simulation.json").write_text(json.dumps(summary, indent=1) + "\n")
    plot(results, out / "routing_simulation.png")
    for r in results:
        print(f"{r['policy']:12s} {r['rate']:5.1f} req/s  TTFT p50 {r['ttft_p50_ms']:8.1f} ms"
              f"  p90 {r['ttft_p90_ms']:8.1f} ms  prefix hits {100 * r['prefix_hit_rate']:5.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
