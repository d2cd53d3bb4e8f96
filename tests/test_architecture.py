"""The import architecture, checked by import-linter with the contracts in pyproject.toml:
the operator and the runtime never import each other, the operator never imports torch,
the kernels never import the runtime, the runtime's folders form no import cycle; and
benchmarks never import tests/.

Each contract is also shown to fail: a copy of the source roots gets one planted module
that breaks it, and import-linter runs on that copy alone.
"""
from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.paths import ROOT

SOURCE_ROOTS = ("runtime", "kernels", "operator")


def lint(tree: Path) -> subprocess.CompletedProcess:
    """`lint-imports` over the source roots under ``tree`` (the repository's roots, which
    an editable install puts on sys.path, are taken off it in that process)."""
    roots = [str(tree / name) for name in SOURCE_ROOTS]
    repo = {str(ROOT), *(str(ROOT / name) for name in SOURCE_ROOTS)}
    code = textwrap.dedent(f"""
        import sys
        sys.path[:] = {roots!r} + [p for p in sys.path if p not in {sorted(repo)!r} and p]
        sys.argv = ["lint-imports", "--no-cache", "--config", {str(tree / "pyproject.toml")!r}]
        from importlinter.cli import lint_imports_command
        lint_imports_command()
    """)
    return subprocess.run([sys.executable, "-c", code], cwd=tree, capture_output=True,
                          text=True, timeout=300)


def test_the_tree_keeps_every_contract():
    result = lint(ROOT)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


@pytest.fixture(scope="module")
def copy_of_the_tree(tmp_path_factory) -> Path:
    tree = tmp_path_factory.mktemp("tree")
    shutil.copy(ROOT / "pyproject.toml", tree)
    for name in SOURCE_ROOTS:
        shutil.copytree(ROOT / name / "kubellm", tree / name / "kubellm",
                        ignore=shutil.ignore_patterns("__pycache__"))
    return tree


PLANTS = {  # contract -> (module planted in the copy, its source)
    "the runtime and the kernels never import the operator":
        ("runtime/kubellm/runtime/core/_planted.py", "import kubellm.operator.crd\n"),
    "the operator imports neither the runtime, the kernels nor torch":
        ("operator/kubellm/operator/_planted.py", "import torch\n"),
    "the kernels never import the runtime":
        ("kernels/kubellm/kernels/_planted.py", "from kubellm.runtime import config\n"),
    # core is imported by engine; core importing engine closes a cycle
    "no import cycles between the runtime's folders (and modules)":
        ("runtime/kubellm/runtime/core/_planted.py",
         "from kubellm.runtime.engine import llm_engine\n"),
}


@pytest.mark.parametrize("contract", sorted(PLANTS))
def test_a_planted_violation_breaks_its_contract(copy_of_the_tree, contract):
    path, source = PLANTS[contract]
    planted = copy_of_the_tree / path
    planted.write_text(source)
    try:
        result = lint(copy_of_the_tree)
    finally:
        planted.unlink()
    assert result.returncode != 0
    assert f"{contract} BROKEN" in result.stdout, result.stdout[-4000:]
    assert "1 broken" in result.stdout


def imports_of_tests(source: str) -> list[str]:
    """Modules under ``tests`` that a Python source imports."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
        found += [n for n in names if n == "tests" or n.startswith("tests.")]
    return found


def test_benchmarks_never_import_tests():
    offenders = {str(p.relative_to(ROOT)): imports_of_tests(p.read_text())
                 for p in (ROOT / "benchmarks").rglob("*.py")}
    assert {k: v for k, v in offenders.items() if v} == {}
    # The check itself: a planted import is found.
    assert imports_of_tests("from tests.gpu import shapes\nimport os\n") == ["tests.gpu"]
