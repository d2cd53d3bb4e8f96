"""Two "pods" on loopback, each running exactly the command and rendezvous env that the
operator's StatefulSet builder gives its pods (only the model, address and ports are
local): node 0 serves HTTP, node 1 only runs its worker; the answer equals one process;
SIGTERM on node 0 drains it and both pods exit 0. A pod lost while the group is idle
(the issue's deleted worker pod) is noticed by node 0's heartbeat within seconds, with no
request needed: node 0 exits non-zero (its pod restarts, unready until the group forms
again), and the lost pod's worker ends with it."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time

import httpx

from kubellm.operator import rendezvous as names
from kubellm.runtime import LLM, SamplingParams
from kubellm.runtime.distributed.rendezvous import free_port
from tests.contract.pod_env import pod_env
from tests.runtime.distributed.conftest import DIST_ENV

SPEC = {"model": {"source": {"huggingFace": "org/model"}},
        "parallelism": {"tensor": 1, "pipeline": 2, "gpusPerNode": 1}, "replicas": 1}
PROMPT = "The capital of France is"


def _pods() -> list[tuple[list[str], dict[str, str]]]:
    from kubellm.operator.builders.children import build_children
    from kubellm.operator.validation import defaulted_spec
    cr = {"apiVersion": "kubellm.io/v1alpha1", "kind": "LLMDeployment",
          "metadata": {"name": "m", "namespace": "ns", "uid": "u"}, "spec": SPEC}
    [sts] = [c for c in build_children(cr, defaulted_spec(SPEC), image="img",
                                       lws_available=False) if c["kind"] == "StatefulSet"]
    template = sts["spec"]["template"]
    container = template["spec"]["containers"][0]
    return [(container["args"], pod_env(container, {
        **template["metadata"]["labels"], names.STATEFULSET_INDEX_LABEL: str(i)}, {}))
        for i in range(sts["spec"]["replicas"])]


def _local(args: list[str], model_dir: str, http_port: int) -> list[str]:
    """The pod's arguments with this machine's model path, address and port."""
    args = list(args)
    args[1] = model_dir
    args[args.index("--host") + 1] = "127.0.0.1"
    args[args.index("--port") + 1] = str(http_port)
    return args + ["--device", "cpu", "--dtype", "float32", "--max-model-len", "256",
                   "--num-kv-blocks", "64", "--uvicorn-log-level", "warning"]


class Pods:
    """The two pods' processes, started with their operator-given env (workers first)."""

    def __init__(self, model_dir: str, extra_env: dict[str, str] | None = None):
        rendezvous_port, http_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{http_port}"
        self.procs, self.logs = [], []
        for node, (args, pod_env) in reversed(list(enumerate(_pods()))):
            env = {**os.environ, **DIST_ENV, "KUBELLM_API_KEY": "",
                   **{k: v for k, v in pod_env.items() if k.startswith("KUBELLM_")},
                   names.MASTER_ADDR: "127.0.0.1", names.MASTER_PORT: str(rendezvous_port),
                   **(extra_env or {})}
            log = tempfile.TemporaryFile(mode="w+")
            self.procs.insert(0, subprocess.Popen(
                [sys.executable, "-m", "kubellm.runtime", *_local(args, model_dir, http_port)],
                env=env, stdout=log, stderr=subprocess.STDOUT, text=True))
            self.logs.insert(0, log)

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 120
        while True:
            assert all(p.poll() is None for p in self.procs), _read(self.logs)
            try:
                if httpx.get(self.url + "/ready", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "node 0 never became ready"
            time.sleep(0.2)

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_two_pods_serve_one_model(tiny_model_dir):
    assert [env[names.NODE_RANK] for _, env in _pods()] == ["0", "1"]
    pods = Pods(tiny_model_dir)
    try:
        pods.wait_ready()
        answer = httpx.post(pods.url + "/v1/completions", timeout=60, json={
            "model": "m", "prompt": PROMPT, "max_tokens": 8, "temperature": 0,
            "ignore_eos": True}).json()
        expected = LLM(tiny_model_dir, device="cpu", dtype="float32").generate(
            PROMPT, SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))
        assert answer["choices"][0]["text"] == expected[0].outputs[0].text
        pods.procs[0].send_signal(signal.SIGTERM)
        assert [p.wait(60) for p in pods.procs] == [0, 0], _read(pods.logs)
    finally:
        pods.kill()


def test_a_lost_pod_is_noticed_without_traffic(tiny_model_dir):
    """Node 1's worker is not node 0's child: only the heartbeat can notice. The
    collective timeout is raised so that the idle keep-alive (every timeout/4) cannot be
    what notices within the 30 s polling deadline (which absorbs a loaded CI machine)."""
    pods = Pods(tiny_model_dir, {"KUBELLM_DIST_TIMEOUT_S": "600"})
    worker = None
    try:
        pods.wait_ready()
        [worker] = _children(pods.procs[1].pid)
        pods.procs[1].kill()  # the pod is gone, SIGKILL included: its worker goes too
        assert pods.procs[0].wait(30) == 1, _read(pods.logs)
        assert "lost a rank" in _read(pods.logs)
        _wait_gone(worker, 30)
    finally:
        pods.kill()


def _children(pid: int) -> list[int]:
    from pathlib import Path
    return [int(c) for task in Path(f"/proc/{pid}/task").iterdir()
            for c in (task / "children").read_text().split()]


def _wait_gone(pid: int, timeout: float) -> None:
    from pathlib import Path
    deadline = time.monotonic() + timeout
    while True:
        try:
            if "State:\tZ" in Path(f"/proc/{pid}/status").read_text():
                return
        except (FileNotFoundError, ProcessLookupError):   # gone, also while being read
            return
        assert time.monotonic() < deadline, f"node 1's worker {pid} outlived its pod"
        time.sleep(0.1)


def _read(logs) -> str:
    out = []
    for node, log in enumerate(logs):
        log.seek(0)
        out.append(f"--- node {node}\n{log.read()[-4000:]}")
    return "\n".join(out)
