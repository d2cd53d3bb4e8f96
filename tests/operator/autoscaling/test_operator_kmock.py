"""The autoscaler as a real Kopf operator process against kmock's Kubernetes emulator.

The "pods" are real aiohttp servers on 127.0.0.1, one port each, serving /metrics with
a scripted queue depth; a small loop in the test plays the Deployment controller (one
pod per spec.replicas). The operator process runs only the autoscaler (`--controllers autoscaler`).
kmock ignores labelSelector on lists, so the namespace holds only this fleet's pods;
that the selector is sent is asserted on the recorded requests.
"""
import asyncio
import contextlib
import os
import signal
import sys
import time

import aiohttp.web
import pytest

NS = "default"
LLMD = "kubellm.io/v1alpha1/llmdeployments"
PODS = "v1/pods"
KEDA = "keda.sh/v1alpha1/scaledobjects"
AUTOSCALING = {"enabled": True, "minReplicas": 1, "maxReplicas": 6, "targetQueueDepth": 8,
               "metricsWindowSeconds": 2, "scrapeIntervalSeconds": 1,
               "scaleUpStabilizationSeconds": 0, "scaleDownStabilizationSeconds": 3,
               "maxScaleUpStep": 4}


class Fleet:
    """spec.replicas -> that many pods, each with a live /metrics on its own port."""

    def __init__(self, kmock, name):
        self.kmock, self.name = kmock, name
        self.waiting = 0.0            # fleet total, shared evenly by the pods
        self.running_per_pod = 0.0
        self.silent: set[int] = set()  # pod indices that answer 500 (unknown)
        self.pods: dict[int, aiohttp.web.AppRunner] = {}
        self.replicas_seen: list[int] = []

    def replicas(self) -> int:
        return self.kmock.objects[LLMD, NS, self.name]["spec"]["replicas"]

    async def _metrics(self, index: int, _request) -> aiohttp.web.Response:
        if index in self.silent:
            return aiohttp.web.Response(status=500)
        waiting = self.waiting / max(1, len(self.pods))
        return aiohttp.web.Response(text=(
            "# TYPE vllm:num_requests_waiting gauge\n"
            f'vllm:num_requests_waiting{{model_name="tiny"}} {waiting}\n'
            "# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{model_name="tiny"}} {self.running_per_pod}\n'))

    async def _start_pod(self, index: int) -> None:
        async def metrics(request):
            return await self._metrics(index, request)

        app = aiohttp.web.Application()
        app.router.add_get("/metrics", metrics)
        runner = aiohttp.web.AppRunner(app)
        await runner.setup()
        site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        self.pods[index] = runner
        self.kmock.objects[PODS, NS, f"{self.name}-{index}"] = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{self.name}-{index}", "namespace": NS,
                         "uid": f"pod-{self.name}-{index}", "labels": {"app": self.name}},
            "spec": {"containers": [{"name": "server", "ports": [{"containerPort": port}]}]},
            "status": {"phase": "Running", "podIP": "127.0.0.1",
                       "conditions": [{"type": "Ready", "status": "True"}]}}

    async def _stop_pod(self, index: int) -> None:
        del self.kmock.objects[PODS, NS, f"{self.name}-{index}"]
        await self.pods.pop(index).cleanup()

    async def run(self) -> None:
        while True:
            wanted = self.replicas()
            if not self.replicas_seen or self.replicas_seen[-1] != wanted:
                self.replicas_seen.append(wanted)
            while len(self.pods) < wanted:
                await self._start_pod(max(self.pods, default=-1) + 1)
            while len(self.pods) > wanted:
                await self._stop_pod(max(self.pods))
            await asyncio.sleep(0.05)

    async def close(self) -> None:
        for runner in self.pods.values():
            await runner.cleanup()


def llmd(name, autoscaling, replicas=1):
    return {"apiVersion": "kubellm.io/v1alpha1", "kind": "LLMDeployment",
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}",
                         "generation": 1, "resourceVersion": "1"},
            "spec": {"model": {"source": {"huggingFace": "tiny"}}, "replicas": replicas,
                     "autoscaling": autoscaling},
            "status": {"selector": f"app={name}"}}


@contextlib.asynccontextmanager
async def operator_process(kmock, tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: kmock\n"
        f"clusters: [{{name: kmock, cluster: {{server: '{kmock.url}'}}}}]\n"
        "users: [{name: kmock, user: {token: test}}]\n"
        "contexts: [{name: kmock, context: {cluster: kmock, user: kmock, namespace: default}}]\n")
    env = dict(os.environ, KUBECONFIG=str(kubeconfig))
    log = open(tmp_path / f"operator-{time.monotonic_ns()}.log", "wb")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "kubellm.operator", "--controllers", "autoscaler",
        "--autoscaler-tick-seconds", "0.2", "--liveness-port", "0", "--log-format", "plain",
        env=env, stdout=log, stderr=log)
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except asyncio.TimeoutError:
                proc.kill()
                await proc.wait()
        log.close()


async def wait_for(predicate, timeout, what, log_dir):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.05)
    logs = "\n".join(p.read_text(errors="replace")[-3000:] for p in log_dir.glob("operator-*.log"))
    pytest.fail(f"timed out after {timeout}s waiting for {what}\n--- operator log ---\n{logs}")


@pytest.fixture
def cluster(kmock):
    kmock.resources[LLMD] = kmock.ResourceInfo(
        kind="LLMDeployment", singular="llmdeployment", namespaced=True,
        verbs={"list", "watch", "get", "patch", "create", "delete"},
        subresources={"status", "scale"})
    kmock.resources["v1/namespaces"] = kmock.ResourceInfo(kind="Namespace", namespaced=False)
    kmock.resources[PODS] = kmock.ResourceInfo(kind="Pod", namespaced=True)
    kmock.resources["v1/events"] = kmock.ResourceInfo(kind="Event", namespaced=True)
    kmock.objects["v1/namespaces", None, NS] = {"metadata": {"name": NS, "uid": "ns-uid"}}
    return kmock


def condition(kmock, name, namespace=NS):
    status = kmock.objects[LLMD, namespace, name].get("status") or {}
    return next((c for c in status.get("conditions") or () if c["type"] == "ScalingActive"), {})


def event_reasons(kmock):
    return [r.data.get("reason") for r in kmock
            if r.method == "POST" and r.url.path.endswith("/events") and isinstance(r.data, dict)]


async def test_replicas_follow_the_queue_up_and_back_down(cluster, tmp_path):
    kmock = cluster
    kmock.objects[LLMD, NS, "llm"] = llmd("llm", AUTOSCALING)
    fleet = Fleet(kmock, "llm")
    fleet.waiting, fleet.running_per_pod = 40.0, 4.0      # ceil(40 / 8) = 5 replicas
    fleet_task = asyncio.create_task(fleet.run())
    try:
        async with operator_process(kmock, tmp_path):
            await wait_for(lambda: fleet.replicas() == 5, 20, "scale-up to 5", tmp_path)
            await wait_for(lambda: len(fleet.pods) == 5, 5, "5 pods", tmp_path)
            # Held at 5 (40 waiting = 8 per pod) even with one pod silent (unknown).
            fleet.silent = {0}
            await asyncio.sleep(2.5)
            assert fleet.replicas() == 5
            status = kmock.objects[LLMD, NS, "llm"]["status"]
            assert status["desiredReplicas"] == 5 and status["lastScaleTime"]
            assert status["queueDepth"] == pytest.approx(40, rel=0.3)
            assert condition(kmock, "llm")["status"] == "True"
            assert len(status["autoscaler"]["samples"]) >= 2

        # A restarted operator resumes from the window kept in status.autoscaler.
        busy_until = max(s[0] for s in kmock.objects[LLMD, NS, "llm"]["status"]
                         ["autoscaler"]["samples"])  # the last sample with 40 waiting
        restart = time.time()
        async with operator_process(kmock, tmp_path):
            fleet.silent, fleet.waiting, fleet.running_per_pod = set(), 0.0, 0.0
            await wait_for(lambda: min(s[0] for s in kmock.objects[LLMD, NS, "llm"]
                                       ["status"]["autoscaler"]["samples"]) < restart
                           and max(s[0] for s in kmock.objects[LLMD, NS, "llm"]
                                   ["status"]["autoscaler"]["samples"]) > restart,
                           15, "a window spanning the restart", tmp_path)
            await wait_for(lambda: fleet.replicas() == 1, 30, "scale-down to 1", tmp_path)
            # Not before the down-stabilization window after the last busy sample (from the
            # samples' own times: a slow restart may use up the window by itself).
            assert time.time() - busy_until >= AUTOSCALING["scaleDownStabilizationSeconds"]
            # the scale patch lands before the same tick's status write: wait for the latter
            await wait_for(lambda: condition(kmock, "llm")["reason"] in
                           {"ScaledDown", "WithinTarget"}, 10, "the ScaledDown condition",
                           tmp_path)
    finally:
        fleet_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await fleet_task
        await fleet.close()

    # Up, then down: no oscillation, never outside the bounds.
    seen = fleet.replicas_seen
    print("replicas seen:", seen, "events:", event_reasons(kmock))
    assert seen[0] == 1 and 5 in seen and seen[-1] == 1, seen
    peak = seen.index(max(seen))
    assert seen[:peak + 1] == sorted(seen[:peak + 1]) and seen[peak:] == sorted(seen[peak:], reverse=True)
    assert max(seen) <= AUTOSCALING["maxReplicas"]
    reasons = event_reasons(kmock)
    assert "ScaledUp" in reasons and "ScaledDown" in reasons, reasons
    assert condition(kmock, "llm")["reason"] in {"ScaledDown", "WithinTarget"}
    scale_patches = [r for r in kmock if r.method == "PATCH" and r.url.path.endswith("/llm/scale")]
    assert scale_patches and all(set(r.data) == {"spec"} for r in scale_patches)
    pod_lists = [r for r in kmock if r.method == "GET" and r.url.path == f"/api/v1/namespaces/{NS}/pods"]
    assert pod_lists and all(r.params.get("labelSelector") == "app=llm" for r in pod_lists)


async def test_modes_that_do_not_scrape(cluster, tmp_path):
    """Autoscaling off: `kubectl scale` rules. keda: a ScaledObject, removed when turned
    off. A bad spec: a False condition and a Warning event, no crash loop."""
    kmock = cluster
    kmock.resources[KEDA] = kmock.ResourceInfo(kind="ScaledObject", namespaced=True)
    kmock.objects[LLMD, NS, "manual"] = llmd("manual", {"enabled": False}, replicas=2)
    kmock.objects[LLMD, NS, "keda"] = llmd("keda", dict(AUTOSCALING, mode="keda"))
    kmock.objects[LLMD, NS, "bad"] = llmd("bad", dict(AUTOSCALING, minReplicas=3,
                                                      maxReplicas=2), replicas=3)
    # A namespace where the ScaledObject API answers 404, as without KEDA installed.
    kmock["post /apis/keda.sh/v1alpha1/namespaces/nokeda/scaledobjects"] << 404
    kmock.objects[LLMD, "nokeda", "keda"] = dict(llmd("keda", dict(AUTOSCALING, mode="keda")),
                                                 metadata={"name": "keda", "namespace": "nokeda",
                                                           "uid": "uid-nokeda"})
    base = f"{kmock.url}/apis/kubellm.io/v1alpha1/namespaces/{NS}/llmdeployments"
    merge = {"Content-Type": "application/merge-patch+json"}
    async with aiohttp.ClientSession() as client, operator_process(kmock, tmp_path):
        await wait_for(lambda: condition(kmock, "manual").get("reason") == "AutoscalingDisabled"
                       and condition(kmock, "keda").get("reason") == "KedaManaged"
                       and condition(kmock, "bad").get("reason") == "InvalidSpec"
                       and condition(kmock, "keda", "nokeda").get("reason") == "KedaUnavailable",
                       15, "the four conditions", tmp_path)
        # What `kubectl scale llmd/manual --replicas 4` sends.
        async with client.patch(f"{base}/manual/scale", json={"spec": {"replicas": 4}},
                                headers=merge) as r:
            assert r.status == 200
        scaled = kmock.objects[KEDA, NS, "keda"]
        assert scaled["spec"]["scaleTargetRef"]["name"] == "keda"
        assert scaled["metadata"]["ownerReferences"][0]["uid"] == "uid-keda"

        async with client.patch(f"{base}/keda", headers=merge,
                                json={"spec": {"autoscaling": {"enabled": False}}}) as r:
            assert r.status == 200
        await wait_for(lambda: kmock.objects[KEDA, NS, "keda"].deleted, 15,
                       "the ScaledObject deleted", tmp_path)
        await asyncio.sleep(1.0)   # several more ticks
        assert kmock.objects[LLMD, NS, "manual"]["spec"]["replicas"] == 4
        assert kmock.objects[LLMD, NS, "bad"]["spec"]["replicas"] == 3

    assert condition(kmock, "manual")["status"] == "False"
    assert "maxReplicas" in condition(kmock, "bad")["message"]
    assert {"InvalidSpec", "KedaUnavailable"} <= set(event_reasons(kmock))
    # The operator never scaled any of them, nor scraped pods for them.
    assert not [r for r in kmock if r.method == "PATCH" and r.url.path.endswith("/scale")
                and r.headers.get("User-Agent", "").startswith("kopf")]
    assert not [r for r in kmock if r.url.path.endswith("/pods")]


async def test_a_users_scaled_object_is_never_taken_over(cluster, tmp_path):
    """keda mode next to a ScaledObject of the same name that is not ours: nothing is
    patched or deleted, ScalingActive says NameConflict with an Event, and turning
    autoscaling off leaves that object alone."""
    kmock = cluster
    kmock.resources[KEDA] = kmock.ResourceInfo(kind="ScaledObject", namespaced=True)
    theirs = {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
              "metadata": {"name": "shared", "namespace": NS},
              "spec": {"scaleTargetRef": {"name": "web"}, "triggers": [{"type": "cpu"}]}}
    kmock.objects[KEDA, NS, "shared"] = theirs
    kmock.objects[LLMD, NS, "shared"] = llmd("shared", dict(AUTOSCALING, mode="keda"))
    base = f"{kmock.url}/apis/kubellm.io/v1alpha1/namespaces/{NS}/llmdeployments"
    async with aiohttp.ClientSession() as client, operator_process(kmock, tmp_path):
        await wait_for(lambda: condition(kmock, "shared").get("reason") == "NameConflict",
                       15, "NameConflict", tmp_path)
        assert "ScaledObject default/shared already exists" in \
            condition(kmock, "shared")["message"]
        async with client.patch(f"{base}/shared",
                                headers={"Content-Type": "application/merge-patch+json"},
                                json={"spec": {"autoscaling": {"enabled": False}}}) as r:
            assert r.status == 200
        await wait_for(lambda: condition(kmock, "shared").get("reason")
                       == "AutoscalingDisabled", 15, "AutoscalingDisabled", tmp_path)
        await asyncio.sleep(1.0)
    stored = kmock.objects[KEDA, NS, "shared"]
    assert not stored.deleted
    assert stored["spec"] == theirs["spec"] and "ownerReferences" not in stored["metadata"]
    assert "NameConflict" in event_reasons(kmock)
    assert not [r for r in kmock if r.method in ("PATCH", "DELETE")
                and r.url.path.endswith("/scaledobjects/shared")]
