"""Files the runtime writes for other processes (model conversions, downloads) stay
readable by them.

A pod's volume may be filled by one process (a root init step, a loader Job) and read by
another user (the runtime's uid 1000, through its group). A restrictive umask (077 is
common for root) or ``tempfile.mkdtemp``'s 0700 would make such files unreadable there,
so writes meant for others go through these helpers.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

SHARED_UMASK = 0o022  # the owner writes; group and others read (and enter directories)


@contextlib.contextmanager
def shared_umask() -> Iterator[None]:
    """Within the block, new files are at least group- and world-readable."""
    previous = os.umask(SHARED_UMASK)
    os.umask(previous & SHARED_UMASK)
    try:
        yield
    finally:
        os.umask(previous)


def make_tree_readable(root: str | os.PathLike) -> None:
    """Add read (and, on directories, search) permission for group and others."""
    root = Path(root)
    for path in [root, *root.rglob("*")]:
        if path.is_symlink():
            continue
        extra = 0o055 if path.is_dir() else 0o044
        path.chmod(path.stat().st_mode | extra)
