"""What the Endpoint Picker and the gateway ask of a model server, served by the runtime
(a real uvicorn server around the tiny model) and by the activator in front of it.

The Gateway API Inference Extension's model-server protocol
(docs/proposals/003-model-server-protocol/README.md): OpenAI Completions and Chat
Completions; Prometheus gauges at /metrics for the queue, the running requests and the
KV-cache use (vLLM's names are the EPP's defaults); a LoRA info gauge (vLLM:
vllm:lora_requests_info, labels max_lora, running_lora_adapters, waiting_lora_adapters,
value a timestamp) and optional block-size / GPU-block labels (vllm:cache_config_info,
block_size, num_gpu_blocks) for the prefix-cache scorer. The EPP keeps one series per
family (it never sums), so each must be a single series. The model is read from the body
and must be one the server serves: an InferenceModelRewrite must target the served name.
"""
from __future__ import annotations

import asyncio
import threading
import time

import httpx
import openai
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from kubellm.operator.activator.proxy import Activator
from kubellm.operator.activator.upstream import Upstreams
from kubellm.operator.builders.children import build_children
from kubellm.operator.builders.pod import HTTP_PORT
from kubellm.operator.validation import defaulted_spec
from tests.runtime.server.conftest import SERVED_NAME, ServerThread, free_port

# (protocol metric, the name the EPP reads by default, type)
PROTOCOL_GAUGES = [("TotalQueuedRequests", "vllm:num_requests_waiting", "gauge"),
                   ("TotalRunningRequests", "vllm:num_requests_running", "gauge"),
                   ("KVCacheUtilization", "vllm:kv_cache_usage_perc", "gauge")]
LORA_INFO = "vllm:lora_requests_info"
LORA_LABELS = {"max_lora", "running_lora_adapters", "waiting_lora_adapters"}
CACHE_INFO = "vllm:cache_config_info"
CACHE_LABELS = {"block_size", "num_gpu_blocks"}


@pytest.fixture(scope="module")
def server(tiny_model_dir):
    with ServerThread(tiny_model_dir) as srv:
        yield srv


def families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def check_protocol_gauges(text: str) -> None:
    found = families(text)
    for protocol, name, type_ in PROTOCOL_GAUGES:
        family = found.get(name)
        assert family is not None, f"{protocol}: {name} is not exported"
        assert family.type == type_, f"{name}: {family.type}, the protocol says {type_}"
        assert len(family.samples) == 1, f"{name}: the EPP reads one series, got " \
                                         f"{len(family.samples)}"
        assert family.samples[0].value >= 0
    kv = found["vllm:kv_cache_usage_perc"].samples[0].value
    assert 0.0 <= kv <= 1.0  # a fraction, as the EPP's kv-cache scorer takes it


def test_the_runtime_exports_the_protocols_gauges(server):
    check_protocol_gauges(httpx.get(f"{server.url}/metrics", timeout=30).text)


def test_the_runtime_exports_the_lora_and_cache_info_the_picker_reads(server):
    """vllm:lora_requests_info (a missing one makes EPP >= v1.5 drop the pod) and
    vllm:cache_config_info (the prefix-cache scorer's block size and pool size)."""
    found = families(httpx.get(f"{server.url}/metrics", timeout=30).text)
    assert LORA_INFO in found, f"{LORA_INFO} is not exported"
    [lora] = found[LORA_INFO].samples
    assert found[LORA_INFO].type == "gauge" and LORA_LABELS <= set(lora.labels)
    assert CACHE_INFO in found, f"{CACHE_INFO} is not exported"
    [cache] = found[CACHE_INFO].samples
    assert CACHE_LABELS <= set(cache.labels)
    assert int(cache.labels["block_size"]) > 0 and int(cache.labels["num_gpu_blocks"]) > 0


def test_the_pool_targets_the_port_and_the_name_the_pods_serve(server):
    """The InferencePool's target port is the container port the runtime listens on (for
    inference and /metrics), and the served model name in the pod's args is the only
    model the server accepts: a gateway's body rewrite must name it."""
    cr = {"apiVersion": "kubellm.io/v1alpha1", "kind": "LLMDeployment",
          "metadata": {"name": "chat", "namespace": "ns", "uid": "u"},
          "spec": {"model": {"name": SERVED_NAME, "source": {"huggingFace": "org/m"}},
                   "routing": {"enabled": True}}}
    children = build_children(cr, defaulted_spec(cr["spec"]), image="img",
                              lws_available=False, pool_available=True)
    [pool] = [c for c in children if c["kind"] == "InferencePool"]
    [deployment] = [c for c in children if c["kind"] == "Deployment"
                    and c["metadata"]["name"] == "chat"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    assert pool["spec"]["targetPorts"] == [{"number": HTTP_PORT}]
    assert args[args.index("--port") + 1] == str(HTTP_PORT)
    assert {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"} in container["ports"]
    served = args[args.index("--served-model-name") + 1]
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="none")
    assert [m.id for m in client.models.list().data] == [served]
    for call in (lambda m: client.completions.create(model=m, prompt="Hi", max_tokens=2),
                 lambda m: client.chat.completions.create(
                     model=m, messages=[{"role": "user", "content": "Hi"}], max_tokens=2)):
        assert call(served).usage.completion_tokens == 2
        with pytest.raises(openai.NotFoundError) as refused:
            call("some-alias")
        assert refused.value.code == "model_not_found"


class ActivatorThread:
    """The activator on a free loopback port in its own event loop; ``addresses`` is what
    its DNS lookup of the ready replicas answers."""

    def __init__(self, upstream_port: int) -> None:
        self.addresses: list[str] = []

        async def resolver(host: str) -> list[str]:
            return list(self.addresses)

        self.activator = Activator(Upstreams("ready.test", upstream_port, 0.05, resolver),
                                   SERVED_NAME, hold_timeout=120)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.runner = web.AppRunner(self.activator.app())
        self.loop.run_until_complete(self.runner.setup())
        self.loop.run_until_complete(web.TCPSite(self.runner, "127.0.0.1", self.port).start())
        self.loop.run_forever()

    def __enter__(self) -> "ActivatorThread":
        self.thread.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/ready", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.05)
        raise RuntimeError("the activator did not start")

    def __exit__(self, *exc) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)


def test_the_activator_holds_a_stream_then_the_runtime_serves_it(server):
    upstream_port = int(server.url.rsplit(":", 1)[1])
    with ActivatorThread(upstream_port) as front:
        # Where the Service or the pool points while no replica is ready, the EPP (and
        # the autoscaler) find the same gauges.
        check_protocol_gauges(httpx.get(f"{front.url}/metrics", timeout=30).text)
        client = openai.OpenAI(base_url=f"{front.url}/v1", api_key="none", timeout=120)
        result: dict = {}

        def stream() -> None:
            chunks = client.chat.completions.create(
                model=SERVED_NAME, stream=True, max_tokens=4,
                messages=[{"role": "user", "content": "Hello"}])
            result["deltas"] = [c.choices[0].delta.content for c in chunks if c.choices]

        caller = threading.Thread(target=stream)
        caller.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            waiting = families(httpx.get(f"{front.url}/metrics", timeout=5).text)[
                "vllm:num_requests_waiting"].samples[0].value
            if waiting == 1:
                break
            time.sleep(0.05)
        assert waiting == 1 and "deltas" not in result  # held, not refused
        front.addresses = ["127.0.0.1"]  # the replica turns ready
        caller.join(120)
        assert len([d for d in result["deltas"] if d]) >= 1
