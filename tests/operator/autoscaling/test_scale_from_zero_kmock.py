"""Scale from zero with the autoscaler process against kmock: an activator "pod" (an
aiohttp server with the activator's labels and its /metrics) holds requests at zero
replicas; the autoscaler scales to one; once all is idle for scaleToZeroAfterSeconds it
goes back to zero. The serving pods are the Fleet of test_operator_kmock."""
import asyncio

import aiohttp.web

from kubellm.operator.builders.meta import activator_labels

from .test_operator_kmock import (LLMD, NS, PODS, Fleet, cluster, condition,  # noqa: F401
                                  llmd, operator_process, wait_for)

FROM_ZERO = {"enabled": True, "minReplicas": 0, "maxReplicas": 3, "targetQueueDepth": 8,
             "metricsWindowSeconds": 2, "scrapeIntervalSeconds": 1,
             "scaleUpStabilizationSeconds": 0, "scaleDownStabilizationSeconds": 1,
             "maxScaleUpStep": 4, "scaleToZeroAfterSeconds": 4}


async def start_activator(kmock, name: str, held: dict) -> aiohttp.web.AppRunner:
    async def metrics(_request):
        return aiohttp.web.Response(text=(
            "# TYPE vllm:num_requests_waiting gauge\n"
            f'vllm:num_requests_waiting{{model_name="tiny"}} {held["n"]}\n'
            "# TYPE vllm:num_requests_running gauge\n"
            'vllm:num_requests_running{model_name="tiny"} 0\n'))

    app = aiohttp.web.Application()
    app.router.add_get("/metrics", metrics)
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    kmock.objects[PODS, NS, f"{name}-activator-x"] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{name}-activator-x", "namespace": NS, "uid": "act",
                     "labels": activator_labels(name)},
        "spec": {"containers": [{"name": "activator",
                                 "ports": [{"containerPort": runner.addresses[0][1]}]}]},
        "status": {"phase": "Running", "podIP": "127.0.0.1",
                   "conditions": [{"type": "Ready", "status": "True"}]}}
    return runner


async def test_held_requests_wake_the_model_and_idleness_puts_it_back_to_zero(cluster,
                                                                              tmp_path):
    kmock = cluster
    kmock.objects[LLMD, NS, "llm"] = llmd("llm", FROM_ZERO, replicas=0)
    fleet = Fleet(kmock, "llm")
    held = {"n": 0}
    activator = await start_activator(kmock, "llm", held)
    fleet_task = asyncio.create_task(fleet.run())
    try:
        async with operator_process(kmock, tmp_path):
            # Nothing held: it stays at zero (and the activator is never a replica).
            await wait_for(lambda: condition(kmock, "llm").get("reason") == "WithinTarget",
                           30, "a decision at zero", tmp_path)
            assert fleet.replicas() == 0
            held["n"] = 1  # a request arrives and waits in the activator
            await wait_for(lambda: fleet.replicas() == 1, 30, "scale from zero", tmp_path)
            held["n"] = 0  # the replica took it; then nothing more comes
            await wait_for(lambda: condition(kmock, "llm").get("reason")
                           == "ScaleToZeroPending", 30, "idle, waiting for the window",
                           tmp_path)
            await wait_for(lambda: fleet.replicas() == 0, 60, "scale to zero", tmp_path)
    finally:
        fleet_task.cancel()
        await fleet.close()
        await activator.cleanup()
    assert fleet.replicas_seen == [0, 1, 0]
