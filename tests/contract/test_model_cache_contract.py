"""The model cache: what the loader Job writes is what the serving pods read.

The loader container runs exactly as the operator builds it (command, args, env), against
a hub on loopback, with the claim's mount path mapped to a temporary folder; then the
serving pod's env and model argument (the operator's too) must resolve the model from
that folder read-only and offline, as `kubellm serve` does at start.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from kubellm.operator.builders import model_cache as mc
from kubellm.operator.builders.children import build_children
from kubellm.operator.validation import defaulted_spec
from tests.runtime.loading.fake_hub import FakeHub

from .pod_env import pod_env

REPO = "org/served"
CR = {"apiVersion": "kubellm.io/v1alpha1", "kind": "LLMDeployment",
      "metadata": {"name": "chat", "namespace": "ns", "uid": "uid-1"},
      "spec": {"model": {"source": {"huggingFace": REPO}, "revision": "v2",
                         "parameters": "1B", "cache": {}}, "replicas": 2}}


def _mapped(env: dict[str, str], mount: Path) -> dict[str, str]:
    """The container's paths under the claim's mount point, moved to ``mount``."""
    return {k: v.replace(mc.MOUNT_PATH, str(mount)) for k, v in env.items()}


def test_the_loader_fills_what_every_serving_pod_reads(tmp_path):
    spec = defaulted_spec(CR["spec"])
    plan = mc.cache_plan(CR, spec)
    job = mc.build_loader_job(CR, spec, plan, "img", attempt=1)
    loader = job["spec"]["template"]["spec"]["containers"][0]
    [deployment] = [c for c in build_children(CR, spec, image="img", lws_available=False)
                    if c["kind"] == "Deployment"]
    server = deployment["spec"]["template"]["spec"]["containers"][0]
    # Both pods mount the same claim, the servers read-only.
    claim = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert claim[mc.VOLUME_NAME]["persistentVolumeClaim"] == {
        "claimName": plan.claim_name, "readOnly": True}
    assert job["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"] == {
        "claimName": plan.claim_name}

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "config.json").write_text('{"model_type": "llama"}')
    (repo / "model.safetensors").write_bytes(os.urandom(100_000))
    mount, scratch = tmp_path / "claim", tmp_path / "tmp"
    mount.mkdir(), scratch.mkdir()
    with FakeHub() as hub:
        hub.add(REPO, repo, branches=("main", "v2"))
        env = {k: str(scratch) + v[len("/tmp"):] if v.startswith("/tmp") else v
               for k, v in pod_env(loader, {}, {}).items()}
        env = _mapped(env, mount)
        args = [a.replace("/dev/termination-log", str(tmp_path / "termination-log"))
                for a in loader["args"]]
        proc = subprocess.run(
            [sys.executable, "-m", "kubellm.runtime", *args],
            env={**os.environ, **env, "HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_XET": "1"},
            capture_output=True, text=True, timeout=120)
    assert loader["command"] == ["kubellm"]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "org/served@" in (tmp_path / "termination-log").read_text()

    os.chmod(mount, 0o555)  # mounted read-only in the serving pods
    try:
        served = _mapped(pod_env(server, {}, {}), mount)
        model = server["args"][1]
        assert served["HF_HUB_OFFLINE"] == "1" and model == REPO
        code = ("from kubellm.runtime.config import EngineConfig; "
                "from kubellm.runtime.assembly import resolve_model_dir; "
                f"print(resolve_model_dir(EngineConfig(model={model!r})))")
        env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env={**env, **served, "HF_ENDPOINT": "http://127.0.0.1:9"},
                              timeout=120)
    finally:
        os.chmod(mount, 0o755)
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = Path(proc.stdout.strip().splitlines()[-1])
    assert (found / "config.json").is_file() and (found / "model.safetensors").is_file()
    assert mount in found.parents
