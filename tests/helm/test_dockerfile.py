"""Static checks of the Dockerfile (no Docker daemon in CI): the promises the chart and
the operator rely on."""
from __future__ import annotations

import json
import re

from kubellm.operator.builders.pod import HTTP_PORT, RUNTIME_UID

from .tools import ROOT

TEXT = (ROOT / "Dockerfile").read_text()


def instructions(name: str) -> list[str]:
    return [m.group(1).strip() for m in re.finditer(rf"^{name}\s+(.+)$", TEXT, re.M)]


def test_default_command_is_kubellm_serve_and_operator_is_a_subcommand():
    assert json.loads(instructions("ENTRYPOINT")[-1]) == ["kubellm"]
    assert json.loads(instructions("CMD")[-1])[0] == "serve"


def test_runs_as_the_non_root_user_the_pods_expect():
    assert instructions("USER")[-1] == f"{RUNTIME_UID}:{RUNTIME_UID}"
    assert f"--uid {RUNTIME_UID}" in TEXT
    assert str(HTTP_PORT) in instructions("EXPOSE")[-1]


def test_cuda_base_and_copied_paths_exist():
    assert re.search(r"ARG CUDA_IMAGE=nvidia/cuda:\S+", TEXT)
    for line in instructions("COPY"):
        if line.startswith("--from"):
            continue
        for src in line.split()[:-1]:
            assert (ROOT / src).exists(), f"COPY source {src} is missing"


def test_dockerignore_keeps_the_context_small_but_not_the_sources():
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    assert {".git", ".venv", ".tools", "tests", "operator"} <= ignored
    assert not {"runtime", "kernels", "pyproject.toml", "README.md"} & ignored


OPERATOR_TEXT = (ROOT / "operator" / "Dockerfile").read_text()


def test_operator_image_is_slim_non_root_and_installs_like_the_test():
    """A slim Python base, only the operator distribution, installed by the script the
    distribution test runs; it never pulls the CUDA image."""
    bases = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", OPERATOR_TEXT, re.M)
    assert bases and bases[0].startswith("python:") and "slim" in bases[0]
    assert "nvidia/cuda" not in OPERATOR_TEXT
    assert "RUN sh /src/install.sh /opt/kubellm-operator" in OPERATOR_TEXT
    assert re.search(r"^USER 1000:1000$", OPERATOR_TEXT, re.M)
    assert json.loads(re.findall(r"^ENTRYPOINT (.+)$", OPERATOR_TEXT, re.M)[-1]) == \
        ["kubellm-operator"]
