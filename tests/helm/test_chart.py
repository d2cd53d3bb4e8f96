"""The Helm chart: lint, render with default and non-default values, validate offline."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from kubellm.operator.crd import build_crd

from .tools import ROOT, binary

CHART = ROOT / "charts" / "kubellm"
K8S_VERSION = "1.31.0"
NON_DEFAULT = {
    "fullnameOverride": "llm-op",
    "image": {"repository": "registry.example.com/kubellm-operator", "tag": "1.2.3",
              "pullPolicy": "Always"},
    "imagePullSecrets": [{"name": "regcred"}],
    "operator": {"watchNamespaces": ["team-a", "team-b"], "logFormat": "plain",
                 "resyncSeconds": 10, "nodeSelector": {"pool": "system"},
                 "tolerations": [{"key": "x", "operator": "Exists"}]},
    "runtime": {"image": {"repository": "registry.example.com/kubellm-cuda", "tag": "1.2.3"}},
    "serviceAccount": {"annotations": {"iam": "role"}},
    "monitoring": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}},
                   "dashboard": {"enabled": False}},
}


def helm(*args: str) -> str:
    result = subprocess.run([str(binary("helm")), *args], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, f"helm {' '.join(args)} failed:\n{result.stderr}"
    return result.stdout


def render(tmp_path: Path, values: dict | None = None, *extra: str) -> list[dict]:
    args = ["template", "rel", str(CHART), "--namespace", "kubellm-system", *extra]
    if values is not None:
        values_file = tmp_path / "values.yaml"
        values_file.write_text(yaml.safe_dump(values))
        args += ["--values", str(values_file)]
    return [doc for doc in yaml.safe_load_all(helm(*args)) if doc]


def by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


@pytest.mark.parametrize("values", [None, NON_DEFAULT], ids=["default", "non-default"])
def test_lint_passes(tmp_path, values):
    args = ["lint", str(CHART), "--strict"]
    if values is not None:
        (tmp_path / "v.yaml").write_text(yaml.safe_dump(values))
        args += ["--values", str(tmp_path / "v.yaml")]
    assert "0 chart(s) failed" in helm(*args)


def test_lint_rejects_values_the_schema_forbids():
    result = subprocess.run([str(binary("helm")), "lint", str(CHART), "--strict", "--set",
                             "operator.logFormat=xml", "--set", "operater.typo=1"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "logFormat" in result.stdout + result.stderr
    assert "operater" in result.stdout + result.stderr


@pytest.mark.parametrize("values", [None, NON_DEFAULT], ids=["default", "non-default"])
def test_rendered_manifests_are_valid(tmp_path, values):
    docs = render(tmp_path, values)
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "ServiceAccount", "ClusterRole"} <= kinds
    for doc in docs:
        if doc["apiVersion"].startswith("monitoring.coreos.com"):
            continue  # not a core kind; checked in its own test
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_default_install_is_cluster_wide_with_dashboard(tmp_path):
    docs = render(tmp_path)
    (dep,) = by_kind(docs, "Deployment")
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "ghcr.io/kubellm/kubellm-operator:0.1.0"
    assert container["command"] == ["kubellm-operator"]
    assert "--default-image=ghcr.io/kubellm/kubellm:0.1.0" in container["args"]
    assert not any(a.startswith("--namespace") for a in container["args"])
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert dep["spec"]["strategy"]["type"] == "Recreate"
    bindings = {b["metadata"]["name"] for b in by_kind(docs, "ClusterRoleBinding")}
    assert bindings == {"rel-kubellm-discovery", "rel-kubellm-workloads"}
    assert by_kind(docs, "RoleBinding") == []
    assert by_kind(docs, "ServiceMonitor") == []
    (dashboard,) = by_kind(docs, "ConfigMap")
    assert json.loads(dashboard["data"]["kubellm-runtime.json"])["uid"] == "kubellm-runtime"


def test_non_default_values_reach_the_manifests(tmp_path):
    docs = render(tmp_path, NON_DEFAULT)
    (dep,) = by_kind(docs, "Deployment")
    pod = dep["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert dep["metadata"]["name"] == "llm-op-operator"
    assert container["image"] == "registry.example.com/kubellm-operator:1.2.3"
    assert container["imagePullPolicy"] == "Always"
    assert "--namespace=team-a" in container["args"] and "--namespace=team-b" in container["args"]
    assert "--default-image=registry.example.com/kubellm-cuda:1.2.3" in container["args"]
    assert "--log-format=plain" in container["args"]
    assert pod["nodeSelector"] == {"pool": "system"}
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    # Namespaced grants only in the watched namespaces.
    assert sorted(b["metadata"]["namespace"] for b in by_kind(docs, "RoleBinding")) == \
        ["team-a", "team-b"]
    assert [b["metadata"]["name"] for b in by_kind(docs, "ClusterRoleBinding")] == \
        ["llm-op-discovery"]
    (monitor,) = by_kind(docs, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["team-a", "team-b"]}
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    assert by_kind(docs, "ConfigMap") == []


def test_rbac_is_least_privilege(tmp_path):
    for role in by_kind(render(tmp_path), "ClusterRole"):
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], rule
            assert "secrets" not in rule["resources"], "the operator never reads Secrets"


def test_chart_crd_equals_crds_folder_and_the_generator(tmp_path):
    chart_crd = (CHART / "crds" / "llmdeployment.yaml").read_text()
    assert chart_crd == (ROOT / "crds" / "llmdeployment.yaml").read_text()
    rendered = by_kind(render(tmp_path, None, "--include-crds"), "CustomResourceDefinition")
    assert rendered == [build_crd()]


def _leaf_keys(values: dict, prefix: str = "") -> set[str]:
    keys = set()
    for key, value in values.items():
        path = f"{prefix}{key}"
        keys |= _leaf_keys(value, path + ".") if isinstance(value, dict) and value and \
            not key.endswith(("resources", "labels")) else {path}
    return keys


def _schema_keys(schema: dict, prefix: str = "") -> set[str]:
    keys = set()
    for key, sub in schema.get("properties", {}).items():
        path = f"{prefix}{key}"
        nested = sub.get("properties")
        keys |= _schema_keys(sub, path + ".") if nested else {path}
    return keys


def test_values_schema_matches_values_yaml():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert _leaf_keys(values) == _schema_keys(schema)


def _documented_keys(lines: list[str]) -> set[str]:
    """Dotted paths of the keys in values.yaml whose comment block holds a '# --'."""
    documented, stack, comments = set(), [], []
    for line in lines:
        if line.strip().startswith("#"):
            comments.append(line)
            continue
        match = re.match(r"(\s*)([A-Za-z][\w-]*):", line)
        if match:
            indent = len(match.group(1))
            stack = [(i, k) for i, k in stack if i < indent] + [(indent, match.group(2))]
            if any("# --" in c for c in comments):
                documented.add(".".join(k for _, k in stack))
        comments = []
    return documented


def test_every_value_is_documented():
    text = (CHART / "values.yaml").read_text()
    missing = _leaf_keys(yaml.safe_load(text)) - _documented_keys(text.splitlines())
    assert missing == set(), f"values without a '# --' comment: {sorted(missing)}"


DESIGN_METRICS = {
    "vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc",
    "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:num_preemptions_total",
    "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
    "vllm:request_success_total", "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds", "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds"}


def test_dashboard_queries_only_metrics_the_runtime_exports():
    dashboard = json.loads((CHART / "dashboards" / "kubellm-runtime.json").read_text())
    used = set()
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            used |= {re.sub(r"_bucket$", "", m)
                     for m in re.findall(r"vllm:[a-z0-9_]+", target["expr"])}
    assert used == DESIGN_METRICS


def _operator_args(docs: list[dict]):
    import argparse

    from kubellm.operator.cli import add_arguments

    [deployment] = by_kind(docs, "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(container["args"])


def test_runtime_network_policies_admit_the_operator_as_a_scraper(tmp_path):
    """The chart tells the operator who it is, so runtime NetworkPolicies admit its scrape;
    the peer must select the operator's own pod (its labels and namespace)."""
    from tests.operator.netpol import Pod, selects

    docs = render(tmp_path)
    args = _operator_args(docs)
    assert args.network_policy is False
    [peer] = args.network_policy_scraper
    pod_labels = by_kind(docs, "Deployment")[0]["spec"]["template"]["metadata"]["labels"]
    assert selects(peer["podSelector"], pod_labels)
    assert selects(peer["namespaceSelector"], Pod("kubellm-system").ns_labels())
    assert not selects(peer["namespaceSelector"], Pod("default").ns_labels())

    prometheus = {"namespaceSelector": {"matchLabels": {"team": "observability"}}}
    args = _operator_args(render(tmp_path, {"runtime": {"networkPolicy": {
        "enabled": True, "scrapers": [prometheus]}}}))
    assert args.network_policy is True
    assert args.network_policy_scraper[1:] == [prometheus]


def test_chart_app_version_matches_both_distributions():
    """The chart deploys the operator and runtime images of one release."""
    import re as _re

    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    versions = {}
    for path in ("runtime/kubellm/runtime/version.py", "operator/kubellm/operator/version.py"):
        versions[path] = _re.search(r'__version__ = "([^"]+)"', (ROOT / path).read_text())[1]
    assert set(versions.values()) == {chart["appVersion"]}, (versions, chart["appVersion"])
