"""`kubellm download`: a hub model into the hub cache, with progress, offline-resolvable.

Against a hub on loopback (tests/runtime/loading/fake_hub.py, HF_ENDPOINT) that speaks
what huggingface_hub asks for; the files land in HF_HUB_CACHE in the hub's own layout, so
`kubellm serve MODEL` with HF_HUB_OFFLINE=1 finds them.
"""
from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runtime.loading.fake_hub import FakeHub

REPO = "org/tiny"


def _repo_files(folder: Path) -> Path:
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (folder / "model.safetensors").write_bytes(os.urandom(300_000))
    (folder / "tokenizer.json").write_text("{}")
    (folder / "README.md").write_text("not needed by the runtime")
    return folder


@pytest.fixture()
def hub(tmp_path):
    with FakeHub() as fake:
        fake.add(REPO, _repo_files(tmp_path / "repo"), branches=("main", "v1"))
        yield fake


def _run(hub: FakeHub, cache: Path, *args: str, umask: int = 0o077):
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(cache),
           "HF_HOME": str(cache.parent / "hf-home"), "HF_HUB_DISABLE_XET": "1",
           "HF_HUB_DISABLE_TELEMETRY": "1"}
    env.pop("HF_HUB_OFFLINE", None)
    # A root loader's usual umask: its files must still be readable by the servers' uid.
    code = f"import os, sys; os.umask({umask}); from kubellm.runtime.cli.main import main; " \
           f"sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, "download", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def _resolve_offline(cache: Path, revision: str | None) -> str:
    """Where `kubellm serve org/tiny` (EngineConfig.model) looks, with the hub unreachable."""
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1",
           "HF_ENDPOINT": "http://127.0.0.1:9"}
    env.pop("KUBELLM_REVISION", None)
    if revision:
        env["KUBELLM_REVISION"] = revision
    code = ("from kubellm.runtime.config import EngineConfig; "
            "from kubellm.runtime.assembly import resolve_model_dir; "
            f"print(resolve_model_dir(EngineConfig(model={REPO!r})))")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip().splitlines()[-1]


def test_download_fills_the_hub_cache_readable_and_resolvable_offline(hub, tmp_path):
    cache = tmp_path / "hub-cache"
    summary = tmp_path / "summary"
    proc = _run(hub, cache, REPO, "--revision", "v1", "--summary-file", str(summary),
                "--progress-seconds", "0.05")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert any("3 files" in line for line in lines), proc.stdout  # README.md is not needed
    assert sum("kubellm download: [" in line for line in lines) == 3  # one per file
    assert "org/tiny@" in summary.read_text() and "downloaded" in summary.read_text()
    assert sorted(hub.file_gets) == [f"{REPO}/config.json", f"{REPO}/model.safetensors",
                                     f"{REPO}/tokenizer.json"]
    for path in cache.rglob("*"):
        if path.is_symlink():
            continue
        mode = path.stat().st_mode
        assert mode & stat.S_IRGRP and mode & stat.S_IROTH, path  # despite umask 077
        if path.is_dir():
            assert mode & stat.S_IXGRP and mode & stat.S_IXOTH, path

    # The servers mount it read-only and never reach the hub.
    os.chmod(cache, 0o555)
    try:
        found = Path(_resolve_offline(cache, "v1"))
        assert (found / "config.json").is_file() and (found / "model.safetensors").is_file()
    finally:
        os.chmod(cache, 0o755)


def test_a_second_download_fetches_nothing(hub, tmp_path):
    cache = tmp_path / "hub-cache"
    assert _run(hub, cache, REPO).returncode == 0
    gets = len(hub.file_gets)
    again = _run(hub, cache, REPO, "--summary-file", str(tmp_path / "s"))
    assert again.returncode == 0, again.stdout + again.stderr
    assert len(hub.file_gets) == gets
    assert "all already cached" in (tmp_path / "s").read_text()
    assert Path(_resolve_offline(cache, None)).is_dir()


@pytest.mark.parametrize("args, gated, expected", [
    (["org/missing"], False, "was not found on the hub"),
    ([REPO, "--revision", "v9"], False, "has no revision 'v9'"),
    ([REPO], True, "is gated"),
], ids=["unknown-repo", "unknown-revision", "gated"])
def test_failures_exit_1_with_a_reason(hub, tmp_path, args, gated, expected):
    if gated:
        hub.gated.add(REPO)
    summary = tmp_path / "summary"
    proc = _run(hub, tmp_path / "hub-cache", *args, "--summary-file", str(summary))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert expected in summary.read_text(), summary.read_text()
    assert expected in proc.stdout
