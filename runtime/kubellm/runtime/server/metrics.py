"""Prometheus metrics under vLLM's names and labels (``model_name``), so that dashboards,
the autoscaler and the Gateway API Inference Extension's endpoint picker built for vLLM
read kubellm unchanged. ``VLLM_METRICS`` lists every vLLM name served (a test holds it).

Each app owns its CollectorRegistry: prometheus_client's default registry is process
global, and several servers may live in one process (tests, benchmarks). Engine-side
numbers (queue depth, KV usage, token counters, tokens per step) come from the engine
core's stats, which it sends every front end with each step, and are read at scrape time;
``vllm:cache_config_info`` from what the core reported at start (CoreInfo). Per-request
numbers are observed by the front end that streams the request, as its outputs arrive:
latencies on its clock, queue/prefill/decode/inference times from the engine's own
timestamps (the core's CLOCK_MONOTONIC, the same clock in every process of the host),
token counts from the outputs.

With several front ends (``--api-server-count``), the supervisor sets
PROMETHEUS_MULTIPROC_DIR before starting them: every front end then writes its
histograms and counters to files there (prometheus_client's multiprocess mode, as vLLM
does), and whichever front end a scrape reaches sums all of them.
"""
from __future__ import annotations

import os
import time

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                    HistogramMetricFamily)

from kubellm.runtime.core.outputs import RequestOutput
from kubellm.runtime.engine_core.streams import EngineHooks, RequestTimes

# Bucket edges as vLLM uses them, so histograms line up on shared dashboards.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
               5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
REQUEST_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                   50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
PREFILL_TOKEN_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
N_BUCKETS = (1, 2, 5, 10, 20)

# (prometheus name, stats attribute, help); counters get "_total" on exposition.
# gpu_* names are vLLM's older spellings of the same values, still read by older
# dashboards and gateways.
_GAUGES = (("vllm:num_requests_running", "num_running", "requests in the running batch"),
           ("vllm:kv_cache_usage_perc", "kv_cache_usage", "fraction of KV blocks in use (0..1)"),
           ("vllm:gpu_cache_usage_perc", "kv_cache_usage", "the same as kv_cache_usage_perc"),
           ("kubellm:num_free_kv_blocks", "num_free_blocks", "free KV-cache blocks"),
           ("kubellm:num_kv_blocks", "num_total_blocks", "KV-cache blocks in the pool"))
_COUNTERS = (("vllm:prompt_tokens", "prompt_tokens_total", "prefill tokens processed"),
             ("vllm:generation_tokens", "generation_tokens_total", "tokens generated"),
             ("vllm:num_preemptions", "num_preemptions_total", "requests preempted"),
             ("vllm:prefix_cache_queries", "prefix_cache_queries_total",
              "prompt tokens looked up in the prefix cache"),
             ("vllm:prefix_cache_hits", "prefix_cache_hits_total",
              "prompt tokens found in the prefix cache"),
             ("vllm:gpu_prefix_cache_queries", "prefix_cache_queries_total",
              "the same as prefix_cache_queries"),
             ("vllm:gpu_prefix_cache_hits", "prefix_cache_hits_total",
              "the same as prefix_cache_hits"))

# name -> (help, buckets or "tokens" for the 1-2-5 series up to max_model_len)
_HISTOGRAMS = {
    "vllm:time_to_first_token_seconds": ("time to first token", TTFT_BUCKETS),
    "vllm:inter_token_latency_seconds": ("time between tokens", ITL_BUCKETS),
    "vllm:time_per_output_token_seconds": ("time between tokens (older name)", ITL_BUCKETS),
    "vllm:request_time_per_output_token_seconds": ("a request's mean time per output "
                                                   "token after the first", ITL_BUCKETS),
    "vllm:e2e_request_latency_seconds": ("arrival to finish", REQUEST_BUCKETS),
    "vllm:request_queue_time_seconds": ("time waiting before first scheduled",
                                        REQUEST_BUCKETS),
    "vllm:request_inference_time_seconds": ("first scheduled to finish", REQUEST_BUCKETS),
    "vllm:request_prefill_time_seconds": ("first scheduled to first token", REQUEST_BUCKETS),
    "vllm:request_decode_time_seconds": ("first token to finish", REQUEST_BUCKETS),
    "vllm:time_per_prefill_token_request_seconds": ("prefill time per prompt token",
                                                    PREFILL_TOKEN_BUCKETS),
    "vllm:request_prompt_tokens": ("prompt tokens per request", "tokens"),
    "vllm:request_generation_tokens": ("tokens generated per request", "tokens"),
    "vllm:request_max_num_generation_tokens": ("most tokens any of a request's n samples "
                                               "generated", "tokens"),
    "vllm:request_params_max_tokens": ("the max_tokens request parameter", "tokens"),
    "vllm:request_params_n": ("the n request parameter", N_BUCKETS),
}
ITERATION_TOKENS = "vllm:iteration_tokens_total"
VLLM_METRICS = sorted({"vllm:num_requests_waiting", "vllm:request_success_total",
                       "vllm:gpu_prefix_cache_hit_rate", "vllm:tokens_total",
                       "vllm:cache_config_info", "vllm:lora_requests_info", ITERATION_TOKENS,
                       *(n for n, _, _ in _GAUGES if n.startswith("vllm:")),
                       *(n + "_total" for n, _, _ in _COUNTERS), *_HISTOGRAMS})


def token_buckets(max_value: int) -> tuple[int, ...]:
    """1, 2, 5, 10, 20, 50, ... up to ``max_value`` (vLLM's token-count buckets)."""
    buckets, scale = [], 1
    while True:
        for mantissa in (1, 2, 5):
            if mantissa * scale > max_value:
                return tuple(buckets)
            buckets.append(mantissa * scale)
        scale *= 10


class _EngineStatsCollector:
    """Gauges, counters and the tokens-per-step histogram read from the engine's stats
    snapshot at scrape time, and the two info gauges vLLM's consumers read."""

    def __init__(self, state, model_name: str, cache_info: dict):
        self.state = state
        self.model_name = model_name
        self.cache_info = cache_info

    def collect(self):
        client = self.state.engine_client
        stats = client.stats
        labels = ["model_name"]
        waiting = GaugeMetricFamily("vllm:num_requests_waiting",
                                    "requests waiting to be scheduled (queue depth)",
                                    labels=labels)
        waiting.add_metric([self.model_name], client.num_waiting)
        yield waiting
        preprocessing = GaugeMetricFamily(
            "kubellm:num_requests_preprocessing",
            "requests this front end is parsing, templating or tokenizing", labels=labels)
        preprocessing.add_metric([self.model_name], self.state.num_preprocessing)
        yield preprocessing
        for name, attr, help_text in _GAUGES:
            gauge = GaugeMetricFamily(name, help_text, labels=labels)
            gauge.add_metric([self.model_name], float(getattr(stats, attr, 0) or 0))
            yield gauge
        for name, attr, help_text in _COUNTERS:
            counter = CounterMetricFamily(name, help_text, labels=labels)
            counter.add_metric([self.model_name], float(getattr(stats, attr, 0) or 0))
            yield counter
        tokens = CounterMetricFamily("vllm:tokens", "prompt and generated tokens (vLLM's "
                                     "older counter)", labels=labels)
        tokens.add_metric([self.model_name],
                          float(getattr(stats, "prompt_tokens_total", 0) or 0)
                          + float(getattr(stats, "generation_tokens_total", 0) or 0))
        yield tokens
        rate = GaugeMetricFamily("vllm:gpu_prefix_cache_hit_rate", "prefix cache hits over "
                                 "queries since the start (vLLM's older gauge)", labels=labels)
        queries = float(getattr(stats, "prefix_cache_queries_total", 0) or 0)
        hits = float(getattr(stats, "prefix_cache_hits_total", 0) or 0)
        rate.add_metric([self.model_name], hits / queries if queries else 0.0)
        yield rate
        snapshot = getattr(stats, "iteration_tokens", None)
        if snapshot is not None:
            bounds, cumulative, total = snapshot
            family = HistogramMetricFamily(ITERATION_TOKENS, "tokens per engine step",
                                           labels=labels)
            edges = [str(float(b)) for b in bounds] + ["+Inf"]
            family.add_metric([self.model_name], list(zip(edges, cumulative)), total)
            yield family
        info = GaugeMetricFamily("vllm:cache_config_info", "the KV cache's configuration",
                                 labels=list(self.cache_info))
        info.add_metric(list(self.cache_info.values()), 1.0)
        yield info
        # kubellm serves no LoRA adapters; the endpoint picker reads the labels, and the
        # value (the time) tells it the series is current
        lora = GaugeMetricFamily("vllm:lora_requests_info", "running and waiting LoRA "
                                 "adapters", labels=["max_lora", "running_lora_adapters",
                                                     "waiting_lora_adapters"])
        lora.add_metric(["0", "", ""], time.time())
        yield lora


class ServerMetrics:
    def __init__(self, model_name: str, max_model_len: int = 8192,
                 cache_info: dict | None = None):
        self.model_name = model_name
        self.cache_info = dict(cache_info or {})
        self.is_multiprocess = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
        self.registry = CollectorRegistry(auto_describe=False)
        # multiprocess: values live in files; the registry would count them twice
        own = None if self.is_multiprocess else self.registry
        labels = ["model_name"]
        self.histograms: dict[str, Histogram] = {}
        for name, (help_text, buckets) in _HISTOGRAMS.items():
            if buckets == "tokens":
                buckets = token_buckets(max_model_len)
            self.histograms[name] = Histogram(name, help_text, labels, buckets=buckets,
                                              registry=own)
        self.success = Counter("vllm:request_success", "finished requests",
                               labels + ["finished_reason"], registry=own)
        # series exist (at 0) from the start, so rates and dashboards work before traffic
        for histogram in self.histograms.values():
            histogram.labels(model_name)
        for reason in ("stop", "length", "abort"):
            self.success.labels(model_name, reason)

    def attach(self, state) -> None:
        """Read engine stats from ``state.engine_client`` and observe its requests."""
        self.registry.register(_EngineStatsCollector(state, self.model_name,
                                                     self.cache_info))
        if self.is_multiprocess:
            from prometheus_client import multiprocess
            multiprocess.MultiProcessCollector(self.registry)
        state.engine_client.hooks = EngineHooks(on_output=self.on_output,
                                                on_abort=self.on_abort)

    def exposition_registry(self) -> CollectorRegistry:
        return self.registry

    def _observe(self, name: str, value) -> None:
        if value is not None:
            self.histograms[name].labels(self.model_name).observe(max(0.0, value))

    def on_output(self, out: RequestOutput, times: RequestTimes, now: float) -> None:
        num_tokens = sum(len(o.token_ids) for o in out.outputs)
        if num_tokens > times.num_tokens:
            if times.first_token is None:
                times.first_token = now
                self._observe("vllm:time_to_first_token_seconds", now - times.arrival)
            else:
                self._observe("vllm:inter_token_latency_seconds", now - times.last_token)
                self._observe("vllm:time_per_output_token_seconds", now - times.last_token)
            times.last_token = now
            times.num_tokens = num_tokens
        if out.finished:
            self._on_finished(out, times, now, num_tokens)

    def _on_finished(self, out: RequestOutput, times: RequestTimes, now: float,
                     num_tokens: int) -> None:
        self._observe("vllm:e2e_request_latency_seconds", now - times.arrival)
        reason = out.outputs[0].finish_reason if out.outputs else "stop"
        self.success.labels(self.model_name, reason or "stop").inc()
        m = out.metrics or {}
        arrival, scheduled = m.get("arrival_time"), m.get("first_scheduled_time")
        first, finished = m.get("first_token_time"), m.get("finished_time")
        num_prompt = len(out.prompt_token_ids)
        self._observe("vllm:request_queue_time_seconds", _span(arrival, scheduled))
        self._observe("vllm:request_inference_time_seconds", _span(scheduled, finished))
        prefill = _span(scheduled, first)
        self._observe("vllm:request_prefill_time_seconds", prefill)
        if prefill is not None and num_prompt:
            self._observe("vllm:time_per_prefill_token_request_seconds", prefill / num_prompt)
        decode = _span(first, finished)
        self._observe("vllm:request_decode_time_seconds", decode)
        longest = max((len(o.token_ids) for o in out.outputs), default=0)
        if decode is not None and longest > 1:
            self._observe("vllm:request_time_per_output_token_seconds",
                          decode / (longest - 1))
        self._observe("vllm:request_prompt_tokens", num_prompt)
        self._observe("vllm:request_generation_tokens", num_tokens)
        self._observe("vllm:request_max_num_generation_tokens", longest)
        self._observe("vllm:request_params_n", times.n)
        self._observe("vllm:request_params_max_tokens", times.max_tokens)

    def on_abort(self, times: RequestTimes) -> None:
        self.success.labels(self.model_name, "abort").inc()


def _span(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else max(0.0, end - start)
