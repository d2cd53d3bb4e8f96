"""Prometheus metrics under vLLM's names (so existing dashboards and the autoscaler work).

Each app owns its CollectorRegistry: prometheus_client's default registry is process
global, and several servers may live in one process (tests, benchmarks). Engine-side
numbers (queue depth, KV usage, token counters) come from the engine core's stats, which
it sends every front end with each step, and are read at scrape time; latencies are
observed by the front end that streams the request, as its outputs arrive.

With several front ends (``--api-server-count``), the supervisor sets
PROMETHEUS_MULTIPROC_DIR before starting them: every front end then writes its
histograms and counters to files there (prometheus_client's multiprocess mode, as vLLM
does), and whichever front end a scrape reaches sums all of them.
"""
from __future__ import annotations

import os

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from kubellm.runtime.core.outputs import RequestOutput
from kubellm.runtime.engine_core.streams import EngineHooks, RequestTimes

# Bucket edges as vLLM uses them, so histograms line up on shared dashboards.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
               5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
REQUEST_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                   50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)

# (prometheus name, stats attribute, help); counters get "_total" appended on exposition.
_GAUGES = (("vllm:num_requests_running", "num_running", "requests in the running batch"),
           ("vllm:kv_cache_usage_perc", "kv_cache_usage", "fraction of KV blocks in use (0..1)"),
           ("kubellm:num_free_kv_blocks", "num_free_blocks", "free KV-cache blocks"),
           ("kubellm:num_kv_blocks", "num_total_blocks", "KV-cache blocks in the pool"))
_COUNTERS = (("vllm:prompt_tokens", "prompt_tokens_total", "prefill tokens processed"),
             ("vllm:generation_tokens", "generation_tokens_total", "tokens generated"),
             ("vllm:num_preemptions", "num_preemptions_total", "requests preempted"),
             ("vllm:prefix_cache_queries", "prefix_cache_queries_total",
              "prompt tokens looked up in the prefix cache"),
             ("vllm:prefix_cache_hits", "prefix_cache_hits_total",
              "prompt tokens found in the prefix cache"))


class _EngineStatsCollector:
    """Gauges and counters read from the engine's stats snapshot at scrape time."""

    def __init__(self, state, model_name: str):
        self.state = state
        self.model_name = model_name

    def collect(self):
        client = self.state.engine_client
        stats = client.stats
        waiting = GaugeMetricFamily("vllm:num_requests_waiting",
                                    "requests waiting to be scheduled (queue depth)",
                                    labels=["model_name"])
        waiting.add_metric([self.model_name], client.num_waiting)
        yield waiting
        preprocessing = GaugeMetricFamily(
            "kubellm:num_requests_preprocessing",
            "requests this front end is parsing, templating or tokenizing",
            labels=["model_name"])
        preprocessing.add_metric([self.model_name], self.state.num_preprocessing)
        yield preprocessing
        for name, attr, help_text in _GAUGES:
            gauge = GaugeMetricFamily(name, help_text, labels=["model_name"])
            gauge.add_metric([self.model_name], float(getattr(stats, attr, 0) or 0))
            yield gauge
        for name, attr, help_text in _COUNTERS:
            counter = CounterMetricFamily(name, help_text, labels=["model_name"])
            counter.add_metric([self.model_name], float(getattr(stats, attr, 0) or 0))
            yield counter


class ServerMetrics:
    def __init__(self, model_name: str):
        self.model_name = model_name
        self.is_multiprocess = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
        self.registry = CollectorRegistry(auto_describe=False)
        # multiprocess: values live in files; the registry would count them twice
        own = None if self.is_multiprocess else self.registry
        labels = ["model_name"]
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "time to first token",
                              labels, buckets=TTFT_BUCKETS, registry=own)
        self.itl = Histogram("vllm:inter_token_latency_seconds", "time between tokens",
                             labels, buckets=ITL_BUCKETS, registry=own)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "arrival to finish",
                             labels, buckets=REQUEST_BUCKETS, registry=own)
        self.queue_time = Histogram("vllm:request_queue_time_seconds",
                                    "time waiting before first scheduled", labels,
                                    buckets=REQUEST_BUCKETS, registry=own)
        self.success = Counter("vllm:request_success", "finished requests",
                               labels + ["finished_reason"], registry=own)
        # series exist (at 0) from the start, so rates and dashboards work before traffic
        for histogram in (self.ttft, self.itl, self.e2e, self.queue_time):
            histogram.labels(model_name)
        for reason in ("stop", "length", "abort"):
            self.success.labels(model_name, reason)

    def attach(self, state) -> None:
        """Read engine stats from ``state.engine_client`` and observe its requests."""
        self.registry.register(_EngineStatsCollector(state, self.model_name))
        if self.is_multiprocess:
            from prometheus_client import multiprocess
            multiprocess.MultiProcessCollector(self.registry)
        state.engine_client.hooks = EngineHooks(on_output=self.on_output,
                                                on_abort=self.on_abort)

    def exposition_registry(self) -> CollectorRegistry:
        return self.registry

    def on_output(self, out: RequestOutput, times: RequestTimes, now: float) -> None:
        num_tokens = sum(len(o.token_ids) for o in out.outputs)
        if num_tokens > times.num_tokens:
            if times.first_token is None:
                times.first_token = now
                self.ttft.labels(self.model_name).observe(now - times.arrival)
            else:
                self.itl.labels(self.model_name).observe(now - times.last_token)
            times.last_token = now
            times.num_tokens = num_tokens
        if out.finished:
            self.e2e.labels(self.model_name).observe(now - times.arrival)
            reason = out.outputs[0].finish_reason if out.outputs else "stop"
            self.success.labels(self.model_name, reason or "stop").inc()
            queued = _queue_seconds(out)
            if queued is not None:
                self.queue_time.labels(self.model_name).observe(queued)

    def on_abort(self, times: RequestTimes) -> None:
        self.success.labels(self.model_name, "abort").inc()


def _queue_seconds(out: RequestOutput) -> float | None:
    """Waiting time from the engine's own timestamps, when it records them."""
    m = out.metrics or {}
    start, scheduled = m.get("arrival_time"), m.get("first_scheduled_time")
    if start is None or scheduled is None:
        return None
    return max(0.0, scheduled - start)
