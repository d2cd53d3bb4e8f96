"""keda mode through the chart: the operator learns the Prometheus address from values, and
the ServiceMonitor yields the series (namespace, service labels) the ScaledObject queries."""
from __future__ import annotations

import re
import subprocess

from kubellm.operator.autoscaling import keda
from kubellm.operator.builders.children import build_children
from kubellm.operator.validation import defaulted_spec

from .test_chart import CHART, by_kind, render
from .tools import binary

PROMETHEUS_ENV = "KUBELLM_PROMETHEUS_ADDRESS"


def operator_env(docs: list[dict]) -> dict[str, str]:
    (dep,) = by_kind(docs, "Deployment")
    return {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]
            ["containers"][0]["env"]}


def test_prometheus_address_defaults_to_the_autoscalers_default(tmp_path):
    assert operator_env(render(tmp_path))[PROMETHEUS_ENV] == keda.DEFAULT_PROMETHEUS_ADDRESS


def test_prometheus_address_follows_values(tmp_path):
    address = "http://prometheus.observability.svc:9090"
    env = operator_env(render(tmp_path, {"keda": {"prometheusAddress": address}}))
    assert env[PROMETHEUS_ENV] == address


def test_a_prometheus_address_that_is_no_url_is_refused():
    result = subprocess.run([str(binary("helm")), "template", "rel", str(CHART), "--set",
                             "keda.prometheusAddress=prometheus:9090"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "prometheusAddress" in result.stderr


def test_service_monitor_series_carry_the_labels_the_scaled_object_queries(tmp_path):
    docs = render(tmp_path, {"monitoring": {"serviceMonitor": {"enabled": True}}})
    (monitor,) = by_kind(docs, "ServiceMonitor")
    # Scale from zero behind an InferencePool: the runtime's queue and the Endpoint
    # Picker's flow-control queue, each from its own Service.
    cr = {"apiVersion": "kubellm.io/v1alpha1", "kind": "LLMDeployment",
          "metadata": {"name": "chat", "namespace": "team-a", "uid": "u"},
          "spec": {"model": {"source": {"huggingFace": "org/m"}}, "replicas": 0,
                   "routing": {"enabled": True},
                   "autoscaling": {"enabled": True, "mode": "keda", "minReplicas": 0}}}
    children = build_children(cr, defaulted_spec(cr["spec"]), image="img",
                              lws_available=False, pool_available=True)
    services = {c["metadata"]["name"]: c for c in children if c["kind"] == "Service"}
    scraped = {}
    for name, service in services.items():
        # The ServiceMonitor selects the Service, on one of its ports...
        if not monitor["spec"]["selector"]["matchLabels"].items() <= \
                service["metadata"]["labels"].items():
            continue
        ports = {p["name"] for p in service["spec"]["ports"]}
        scraped[name] = [e for e in monitor["spec"]["endpoints"] if e["port"] in ports]
    assert set(scraped) == {"chat", "chat-epp"} and all(scraped.values()), scraped
    for endpoints in scraped.values():
        for endpoint in endpoints:
            # ...and leaves the Prometheus Operator's target labels alone: namespace and
            # service come from the target (the Service), not the series or a relabeling.
            assert not endpoint.get("honorLabels", False)
            for relabel in endpoint.get("relabelings", []) + \
                    endpoint.get("metricRelabelings", []):
                touched = set(relabel.get("sourceLabels", [])) | {relabel.get("targetLabel")}
                assert not touched & {"namespace", "service"}, relabel
                assert relabel.get("action") not in ("labeldrop", "labelkeep"), relabel
    # The ScaledObject's queries select exactly those Services' series.
    scaled = keda.build_scaled_object("chat", "team-a", cr["spec"], "u")
    queried = set()
    for trigger in scaled["spec"]["triggers"]:
        selectors = dict(re.findall(r'(\w+)="([^"]*)"', trigger["metadata"]["query"]))
        assert selectors["namespace"] == "team-a" and selectors["service"] in scraped
        queried.add(selectors["service"])
    assert queried == {"chat", "chat-epp"}
