"""The two distributions, built and installed the way their images do it.

- kubellm-operator: operator/install.sh (what operator/Dockerfile runs) into a fresh
  venv: the command works, neither torch nor the runtime comes along, and its
  site-packages stays within 150 MiB.
- kubellm (the runtime): its wheel holds kubellm/runtime and kubellm/kernels only; the
  `kubellm` namespace itself has no __init__ (PEP 420), so both distributions share it.
"""
from __future__ import annotations

import re
import subprocess
import sys
import zipfile

from tests.paths import ROOT

MAX_OPERATOR_SITE_MIB = 150


def test_operator_installs_alone_and_small(tmp_path):
    proc = subprocess.run(["sh", str(ROOT / "operator" / "install.sh"), str(tmp_path / "venv")],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    print(proc.stdout)  # the size, for the log
    assert re.search(r"^kubellm-operator \d+\.\d+\.\d+$", proc.stdout, re.M)
    size = float(re.search(r"site-packages: ([\d.]+) MiB", proc.stdout)[1])
    assert 0 < size <= MAX_OPERATOR_SITE_MIB
    help_text = subprocess.run([str(tmp_path / "venv" / "bin" / "kubellm-operator"), "--help"],
                               capture_output=True, text=True, timeout=120).stdout
    assert "--default-image" in help_text and "--controllers" in help_text


def _wheel_names(source, out) -> list[str]:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out),
                    str(source)], check=True, timeout=600)
    [wheel] = out.glob("*.whl")
    return zipfile.ZipFile(wheel).namelist()


def test_runtime_wheel_holds_runtime_and_kernels_only(tmp_path):
    names = [n for n in _wheel_names(ROOT, tmp_path) if not n.startswith("kubellm-")]
    assert "kubellm/runtime/engine/llm_engine.py" in names
    assert "kubellm/kernels/paged_attention.py" in names
    assert "kubellm/kernels/fused_moe_configs.json" in names   # the tuned block sizes
    assert all(n.startswith(("kubellm/runtime/", "kubellm/kernels/")) for n in names), \
        sorted({n.split("/")[1] for n in names})
    assert "kubellm/__init__.py" not in names


def test_operator_wheel_holds_the_operator_only(tmp_path):
    names = [n for n in _wheel_names(ROOT / "operator", tmp_path)
             if not n.startswith("kubellm_operator-")]
    assert "kubellm/operator/reconcile.py" in names
    assert all(n.startswith("kubellm/operator/") for n in names)


def test_no_top_level_folder_shadows_the_standard_library(tmp_path):
    """From the repository root (on sys.path first, as with `python -c`/`-m`), Python's own
    operator, json and collections modules are found, not folders of this repository."""
    code = ("import collections, json, operator, pathlib; "
            "assert operator.eq(1, 1) and hasattr(collections, 'OrderedDict'); "
            "assert 'site-packages' in json.__file__ or 'python3' in json.__file__, json.__file__")
    for interpreter in (sys.executable, sys.base_prefix + "/bin/python3"):
        proc = subprocess.run([interpreter, "-c", code], cwd=ROOT, capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 0, (interpreter, proc.stderr)
    (tmp_path / "in.json").write_text('{"a": 1}')
    proc = subprocess.run([sys.executable, "-m", "json.tool", str(tmp_path / "in.json")],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and '"a": 1' in proc.stdout
