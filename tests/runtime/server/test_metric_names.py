"""/metrics serves vLLM's metric names with vLLM's labels, including the two info gauges
the Gateway API Inference Extension's endpoint picker reads."""
from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from kubellm.runtime.server.metrics import VLLM_METRICS
from tests.runtime.server.conftest import SERVED_NAME, scrape

# Every vLLM name kubellm serves (vLLM's docs list more: swap, CPU offload, speculative
# decoding and multimodal ones describe features kubellm does not have).
EXPECTED = """
vllm:num_requests_running vllm:num_requests_waiting vllm:kv_cache_usage_perc
vllm:gpu_cache_usage_perc vllm:cache_config_info vllm:lora_requests_info
vllm:gpu_prefix_cache_hit_rate vllm:prompt_tokens_total vllm:generation_tokens_total
vllm:num_preemptions_total vllm:prefix_cache_queries_total vllm:prefix_cache_hits_total
vllm:tokens_total
vllm:gpu_prefix_cache_queries_total vllm:gpu_prefix_cache_hits_total
vllm:request_success_total vllm:iteration_tokens_total vllm:time_to_first_token_seconds
vllm:inter_token_latency_seconds vllm:time_per_output_token_seconds
vllm:request_time_per_output_token_seconds vllm:e2e_request_latency_seconds
vllm:request_queue_time_seconds vllm:request_inference_time_seconds
vllm:request_prefill_time_seconds vllm:request_decode_time_seconds
vllm:time_per_prefill_token_request_seconds vllm:request_prompt_tokens
vllm:request_generation_tokens vllm:request_max_num_generation_tokens
vllm:request_params_max_tokens vllm:request_params_n
""".split()
PER_REQUEST = [n for n in EXPECTED if n.startswith("vllm:request_") and
               not n.endswith("_total")] + ["vllm:iteration_tokens_total"]


def samples(text: str) -> dict[str, list]:
    """{sample name: [(labels, value)]}."""
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def test_vllm_names_and_labels(server):
    assert sorted(EXPECTED) == VLLM_METRICS
    r = httpx.post(server.url + "/v1/completions", timeout=60, json={
        "prompt": "Hello", "max_tokens": 5, "n": 2, "temperature": 1.0, "ignore_eos": True})
    assert r.status_code == 200
    server.wait_idle()
    found = samples(scrape(server.url))
    for name in EXPECTED:
        series = found.get(name) or found.get(name + "_count") or found.get(name + "_total")
        assert series, f"{name} is missing"
        if name not in ("vllm:cache_config_info", "vllm:lora_requests_info"):
            assert all(labels.get("model_name") == SERVED_NAME for labels, _ in series), name
    for name in PER_REQUEST:   # observed once the request finished
        assert found[name + "_count"][0][1] >= 1, name
    n_sum = found["vllm:request_params_n_sum"][0][1]
    assert n_sum >= 2 and found["vllm:request_max_num_generation_tokens_sum"][0][1] >= 5


def test_info_gauges_the_endpoint_picker_reads(server):
    found = samples(scrape(server.url))
    (labels, value), = found["vllm:cache_config_info"]
    # the engine lives in the core process: its pool size is in the stats it sends
    assert labels["block_size"] == str(server.engine_config.block_size)
    assert labels["num_gpu_blocks"] == str(server.stats.num_total_blocks) and value == 1
    assert labels["enable_prefix_caching"] == "True"
    (labels, value), = found["vllm:lora_requests_info"]
    assert labels == {"max_lora": "0", "running_lora_adapters": "",
                      "waiting_lora_adapters": ""} and value > 0
