"""The Hugging Face hub: which files of a model repository the runtime needs, and how
``kubellm download`` puts them into the hub cache (``HF_HUB_CACHE``) with progress lines.

The cache is huggingface_hub's own layout (blobs, snapshots/<commit>, refs/<revision>),
so the runtime later finds the model by its id and revision offline, exactly as after
its own download, and several loaders of the same files serialize on the hub's locks.
"""
from __future__ import annotations

import fnmatch
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kubellm.runtime.loading.shared_files import make_tree_readable, shared_umask

# What a served Llama-family checkpoint needs: config, weights, tokenizer.
WEIGHT_PATTERNS = ["*.json", "*.safetensors", "tokenizer*", "*.model", "*.txt"]


@dataclass(frozen=True)
class DownloadSummary:
    repo: str
    commit: str
    num_files: int
    total_bytes: int
    fetched_bytes: int  # what was not in the cache already
    seconds: float
    path: str

    def line(self) -> str:
        rate = self.fetched_bytes / self.seconds if self.seconds > 0 else 0.0
        fetched = (f"downloaded {_gb(self.fetched_bytes)} in {self.seconds:.0f}s "
                   f"({_gb(rate)}/s)" if self.fetched_bytes else "all already cached")
        return (f"{self.repo}@{self.commit[:12]}: {self.num_files} files, "
                f"{_gb(self.total_bytes)}; {fetched}")


def _gb(size: float) -> str:
    return f"{size / 1e9:.2f} GB"


def wanted(filename: str) -> bool:
    return any(fnmatch.fnmatch(filename, p) for p in WEIGHT_PATTERNS) and "/" not in filename


def repo_cache_dir(repo: str) -> Path:
    from huggingface_hub import constants
    return Path(constants.HF_HUB_CACHE) / ("models--" + repo.replace("/", "--"))


def _cached_bytes(repo_dir: Path) -> int:
    """Bytes in the repository's blobs, finished or still being written."""
    blobs = repo_dir / "blobs"
    try:
        return sum(entry.stat().st_size for entry in blobs.iterdir() if entry.is_file())
    except OSError:
        return 0


def download(repo: str, revision: str | None, *, max_workers: int = 4,
             progress_seconds: float = 15.0,
             say: Callable[[str], None] = print) -> DownloadSummary:
    """Fetch the files the runtime needs into the hub cache; raises huggingface_hub's
    errors (repository, revision or gate) as they come."""
    from huggingface_hub import HfApi, hf_hub_download, snapshot_download
    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()  # one line per event in a pod's log, not a bar per file
    started = time.monotonic()
    info = HfApi().model_info(repo, revision=revision, files_metadata=True)
    files = sorted((s.rfilename, s.size or 0) for s in info.siblings or [] if wanted(s.rfilename))
    if not any(name.endswith(".safetensors") for name, _ in files):
        raise FileNotFoundError(f"{repo}@{info.sha}: no *.safetensors weights to serve")
    total = sum(size for _, size in files)
    repo_dir = repo_cache_dir(repo)
    before = _cached_bytes(repo_dir)
    say(f"{repo}@{info.sha[:12]} (revision {revision or 'main'}): {len(files)} files, "
        f"{_gb(total)} into {repo_dir}")
    done_bytes, stop = 0, threading.Event()

    def ticker() -> None:  # byte-level progress while large shards stream in
        while not stop.wait(progress_seconds):
            now = min(total, _cached_bytes(repo_dir))
            elapsed = time.monotonic() - started
            say(f"progress: {_gb(now)} / {_gb(total)} ({100 * now / max(total, 1):.0f}%), "
                f"{_gb((now - before) / max(elapsed, 1e-9))}/s")

    with shared_umask():  # the servers read these files as another user
        watcher = threading.Thread(target=ticker, daemon=True)
        watcher.start()
        try:
            with ThreadPoolExecutor(max_workers=max_workers) as pool:
                futures = {pool.submit(hf_hub_download, repo, name, revision=info.sha): (name, size)
                           for name, size in files}
                for count, future in enumerate(as_completed(futures), 1):
                    future.result()
                    name, size = futures[future]
                    done_bytes += size
                    say(f"[{count}/{len(files)}] {name} ({_gb(size)}): {_gb(done_bytes)} / "
                        f"{_gb(total)} ({100 * done_bytes / max(total, 1):.0f}%)")
            # Records refs/<revision> -> commit, so the runtime finds a branch or tag offline.
            path = snapshot_download(repo, revision=revision, allow_patterns=WEIGHT_PATTERNS)
        finally:
            stop.set()
    make_tree_readable(repo_dir)
    fetched = max(0, _cached_bytes(repo_dir) - before)
    return DownloadSummary(repo, info.sha, len(files), total, fetched,
                           time.monotonic() - started, str(path))


def explain(exc: BaseException, repo: str, revision: str | None) -> str:
    """One line a user can act on, for the errors a download meets."""
    from huggingface_hub import errors

    if isinstance(exc, errors.GatedRepoError):
        return (f"{repo} is gated: accept its license on the hub and give a token with "
                "access (HF_TOKEN; spec.model.source.tokenSecretRef)")
    if isinstance(exc, errors.RepositoryNotFoundError):
        return (f"{repo} was not found on the hub (a private repository needs a token: "
                "HF_TOKEN; spec.model.source.tokenSecretRef)")
    if isinstance(exc, errors.RevisionNotFoundError):
        return f"{repo} has no revision {revision!r}"
    return f"{type(exc).__name__}: {exc}".strip()[:2000]
