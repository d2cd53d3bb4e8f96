"""examples/cpu-default-model.yaml: the pod the operator builds runs the runtime as it is.

The runtime is started with exactly the pod's command, args and env (plus the image's
ENV lines from the Dockerfile), with two substitutions a test on a shared machine needs:
the container's /cache volume becomes a fresh temporary folder, and port 8000 a free one.
It must find the embedded model from a cold cache, run on CPU and answer over HTTP.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request

import yaml

from kubellm.operator.builders.children import build_children
from kubellm.operator.builders.pod import CACHE_MOUNT, HTTP_PORT
from kubellm.operator.validation import defaulted_spec
from tests.runtime.server.conftest import free_port

from tests.paths import ROOT
EXAMPLE = ROOT / "examples" / "cpu-default-model.yaml"


def _runtime_container() -> dict:
    cr = yaml.safe_load(EXAMPLE.read_text())
    cr["metadata"].update(namespace="default", uid="uid-1")
    children = build_children(cr, defaulted_spec(cr["spec"]), image="img",
                              lws_available=False)
    [deployment] = [c for c in children if c["kind"] == "Deployment"]
    return deployment["spec"]["template"]["spec"]["containers"][0]


def _image_env() -> dict[str, str]:
    """The runtime image's ENV instruction (its last stage), as Docker would set it."""
    text = (ROOT / "Dockerfile").read_text()
    last_env = re.findall(r"^ENV\s+((?:.*\\\n)*.*)$", text, re.M)[-1]
    pairs = re.findall(r"(\w+)=(\S+)", last_env.replace("\\\n", " "))
    return {k: v for k, v in pairs if k != "PATH"}


def test_cpu_example_requests_no_accelerator():
    container = _runtime_container()
    limits = container["resources"].get("limits", {})
    assert not any("gpu" in key for key in limits), limits
    assert container["resources"]["requests"]["cpu"] and \
        container["resources"]["requests"]["memory"]
    assert "--device" in container["args"] and \
        container["args"][container["args"].index("--device") + 1] == "cpu"


def test_runtime_starts_from_the_pods_command_and_env(tmp_path):
    container = _runtime_container()
    cache, port = tmp_path / "cache", free_port()
    cache.mkdir()

    def local(value: str) -> str:
        return value.replace(CACHE_MOUNT, str(cache))

    env = {k: local(v) for k, v in _image_env().items()}
    for var in container["env"]:
        assert "valueFrom" not in var, var  # the example names no Secret
        env[var["name"]] = local(var["value"])
    args = [str(port) if a == str(HTTP_PORT) else a for a in container["args"]]
    executable = shutil.which(container["command"][0], path=os.path.dirname(sys.executable))
    proc = subprocess.Popen([executable, *args], cwd=tmp_path,
                            env={"PATH": os.environ["PATH"], **env},
                            stdout=open(tmp_path / "runtime.log", "w"),
                            stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while True:
            assert proc.poll() is None, (tmp_path / "runtime.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"{base}/ready", timeout=5) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the runtime never became ready"
            time.sleep(0.5)
        with urllib.request.urlopen(f"{base}/v1/models", timeout=10) as resp:
            models = json.load(resp)
        assert [m["id"] for m in models["data"]] == ["smollm2"]
        body = json.dumps({"model": "smollm2", "max_tokens": 8, "temperature": 0,
                           "messages": [{"role": "user", "content":
                                         "What is the capital of France?"}]}).encode()
        request = urllib.request.Request(f"{base}/v1/chat/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as resp:
            answer = json.load(resp)["choices"][0]["message"]["content"]
        assert "Paris" in answer
    finally:
        proc.terminate()
        proc.wait(30)
    # The embedded model was converted into the pod's cache volume, readable by others.
    converted = cache / "kubellm" / "models" / "SmolLM2-135M-Instruct"
    assert (converted / "config.json").is_file()
