"""spec.routing and scale from zero in the built manifests: the InferencePool (checked
against the Gateway API Inference Extension's published CRD), the Endpoint Picker's
objects, the activator, and where the Service points."""
from __future__ import annotations

import kubernetes_validate
import pytest
import yaml

from kubellm.operator.builders.children import build_children
from kubellm.operator.builders.startup import startup_seconds
from kubellm.operator.builders.routing import (DEFAULT_PLUGINS, EPP_RULES, GRPC_PORT,
                                               POOL_API_VERSION)
from kubellm.operator.validation import defaulted_spec
from tests.thirdparty_crds import crd_errors

from .test_operator_builders import K8S_VERSION, cr

HF = {"source": {"huggingFace": "Qwen/Qwen2.5-7B-Instruct"}}
ROUTED = {"model": HF, "routing": {"enabled": True}, "replicas": 2}
FROM_ZERO = {"model": HF, "replicas": 0,
             "autoscaling": {"enabled": True, "minReplicas": 0, "maxReplicas": 4}}


def built(spec: dict, *, pool: bool = True, to_activator: bool = False,
          lws: bool = False) -> dict[tuple[str, str], dict]:
    return {(c["kind"], c["metadata"]["name"]): c for c in build_children(
        cr(spec), defaulted_spec(spec), image="img", lws_available=lws,
        pool_available=pool, route_to_activator=to_activator, epp_image="epp:1",
        activator_image="op:1")}


def test_routing_builds_the_pool_and_the_endpoint_picker():
    children = built(ROUTED)
    assert {("InferencePool", "m"), ("ConfigMap", "m-epp"), ("ServiceAccount", "m-epp"),
            ("Role", "m-epp"), ("RoleBinding", "m-epp"), ("Deployment", "m-epp"),
            ("Service", "m-epp"), ("Service", "m"), ("Deployment", "m")} <= set(children)
    pool = children[("InferencePool", "m")]
    assert pool["apiVersion"] == POOL_API_VERSION
    assert crd_errors(pool) == []  # the project's own CRD (schema and CEL rules)
    assert pool["spec"]["selector"]["matchLabels"] == \
        children[("Service", "m")]["spec"]["selector"]  # the pods that serve HTTP
    assert pool["spec"]["targetPorts"] == [{"number": 8000}]
    assert pool["spec"]["endpointPickerRef"] == {
        "name": "m-epp", "kind": "Service", "port": {"number": GRPC_PORT},
        "failureMode": "FailClose"}
    epp = children[("Deployment", "m-epp")]
    container = epp["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "epp:1"
    args = container["args"]
    assert args[args.index("--pool-name") + 1] == "m"
    assert args[args.index("--pool-namespace") + 1] == "ns"
    assert "--metrics-endpoint-auth=false" in args
    assert epp["spec"]["template"]["spec"]["serviceAccountName"] == "m-epp"
    service = children[("Service", "m-epp")]
    grpc = next(p for p in service["spec"]["ports"] if p["port"] == GRPC_PORT)
    assert grpc["appProtocol"] == "http2"
    assert children[("Role", "m-epp")]["rules"] == EPP_RULES
    binding = children[("RoleBinding", "m-epp")]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "m-epp",
                                    "namespace": "ns"}]
    # Its pods are no model server: no server selector may match them.
    labels = epp["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/name"] == "kubellm-epp"
    pdb = children[("PodDisruptionBudget", "m")]
    assert not pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    for (kind, _), child in children.items():
        if kind != "InferencePool":
            kubernetes_validate.validate(child, K8S_VERSION, strict=True)


def test_default_plugins_score_queue_kv_cache_and_prefix_hits():
    config = yaml.safe_load(built(ROUTED)[("ConfigMap", "m-epp")]["data"]
                            ["default-plugins.yaml"])
    assert config["kind"] == "EndpointPickerConfig"
    weights = {p["pluginRef"]: p["weight"] for p in config["schedulingProfiles"][0]["plugins"]}
    assert weights == {"queue-scorer": 2, "kv-cache-utilization-scorer": 2,
                       "prefix-cache-scorer": 3}
    assert "featureGates" not in config


def test_a_new_plugins_config_rolls_the_endpoint_picker():
    own = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"
    children = built({**ROUTED, "routing": {"enabled": True, "endpointPicker": {
        "pluginsConfig": own, "failureMode": "FailOpen", "extraArgs": ["--v=4"],
        "image": "mine:2"}}})
    assert children[("ConfigMap", "m-epp")]["data"]["default-plugins.yaml"] == own
    epp = children[("Deployment", "m-epp")]
    container = epp["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "mine:2" and container["args"][-1] == "--v=4"
    assert children[("InferencePool", "m")]["spec"]["endpointPickerRef"]["failureMode"] == \
        "FailOpen"
    default = built(ROUTED)[("Deployment", "m-epp")]
    key = "kubellm.io/plugins-config-sha256"
    assert epp["spec"]["template"]["metadata"]["annotations"][key] != \
        default["spec"]["template"]["metadata"]["annotations"][key]


def test_without_the_pool_crd_or_routing_nothing_of_it_is_built():
    for children in (built(ROUTED, pool=False), built({"model": HF})):
        assert not [k for k in children if k[0] in ("InferencePool", "Role", "ConfigMap")
                    or k[1].endswith("-epp")]


def test_keda_scale_from_zero_behind_the_pool_turns_flow_control_on():
    spec = {**ROUTED, "replicas": 0, "autoscaling": {"enabled": True, "mode": "keda",
                                                     "minReplicas": 0, "maxReplicas": 3}}
    config = yaml.safe_load(built(spec)[("ConfigMap", "m-epp")]["data"]
                            ["default-plugins.yaml"])
    assert config["featureGates"] == ["flowControl"]


def test_scale_from_zero_adds_the_activator_and_points_the_service_at_it():
    children = built(FROM_ZERO, to_activator=True)
    activator = children[("Deployment", "m-activator")]
    pod = activator["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == "op:1" and container["command"] == ["kubellm-activator"]
    args = container["args"]
    assert args[args.index("--upstream") + 1] == "m-ready.ns.svc"
    assert args[args.index("--served-model-name") + 1] == "m"
    # As long as a replica may take to start (its startup budget) and to be placed.
    assert int(args[args.index("--hold-timeout-seconds") + 1]) == \
        startup_seconds(defaulted_spec(FROM_ZERO)) + 300
    assert pod["automountServiceAccountToken"] is False
    labels = activator["spec"]["template"]["metadata"]["labels"]
    assert children[("Service", "m")]["spec"]["selector"] == {
        "app.kubernetes.io/name": "kubellm-activator", "app.kubernetes.io/instance": "m",
        "kubellm.io/role": "activator"}
    assert children[("Service", "m")]["spec"]["selector"].items() <= labels.items()
    ready = children[("Service", "m-ready")]
    assert ready["spec"]["clusterIP"] == "None"
    assert ready["spec"]["publishNotReadyAddresses"] is False
    assert ready["spec"]["selector"]["kubellm.io/role"] == "leader"  # the serving pods
    # Replicas ready: the Service selects them again; the activator stays, idle.
    back = built(FROM_ZERO, to_activator=False)
    assert back[("Service", "m")]["spec"]["selector"]["kubellm.io/role"] == "leader"
    assert ("Deployment", "m-activator") in back
    for child in (activator, ready):
        kubernetes_validate.validate(child, K8S_VERSION, strict=True)


def test_the_pool_follows_the_service_to_the_activator():
    spec = {**FROM_ZERO, "routing": {"enabled": True}}
    children = built(spec, to_activator=True)
    assert children[("InferencePool", "m")]["spec"]["selector"]["matchLabels"] == \
        children[("Service", "m")]["spec"]["selector"]
    assert crd_errors(children[("InferencePool", "m")]) == []


def test_network_policy_admits_the_activator_and_the_endpoint_picker():
    spec = {**FROM_ZERO, "routing": {"enabled": True},
            "networkPolicy": {"enabled": True, "from": [{"podSelector": {
                "matchLabels": {"app": "client"}}}]}}
    policy = built(spec)[("NetworkPolicy", "m")]
    clients, scrapers = policy["spec"]["ingress"][0]["from"], policy["spec"]["ingress"][1]["from"]
    activator = built(spec)[("Deployment", "m-activator")]
    assert {"podSelector": {"matchLabels": activator["spec"]["selector"]["matchLabels"]}} \
        in clients
    assert {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "kubellm-epp",
                                            "app.kubernetes.io/instance": "m"}}} in scrapers


@pytest.mark.parametrize("lws", [False, True])
def test_switching_to_the_activator_keeps_the_selectors_keys(lws):
    """A server-side apply keeps selector keys another field manager set (the POST that
    created the Service): the switch must change values only, for every topology."""
    spec = {**FROM_ZERO, "parallelism": {"tensor": 8, "pipeline": 2},
            "model": {**HF, "cache": {"accessMode": "ReadWriteMany"}}}
    serving = built(spec, lws=lws)[("Service", "m")]["spec"]["selector"]
    switched = built(spec, lws=lws, to_activator=True)
    selector = switched[("Service", "m")]["spec"]["selector"]
    assert selector.keys() == serving.keys() and selector != serving
    labels = switched[("Deployment", "m-activator")]["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= labels.items()


@pytest.mark.parametrize("lws", [False, True])
def test_multi_node_pools_select_only_the_pods_that_serve(lws):
    spec = {"model": HF, "parallelism": {"tensor": 8, "pipeline": 2},
            "routing": {"enabled": True}}
    children = built(spec, lws=lws)
    selector = children[("InferencePool", "m")]["spec"]["selector"]["matchLabels"]
    assert selector == children[("Service", "m")]["spec"]["selector"]
    assert ("kubellm.io/role" in selector) or ("apps.kubernetes.io/pod-index" in selector)
    assert crd_errors(children[("InferencePool", "m")]) == []


def test_default_plugins_text_is_yaml():
    assert yaml.safe_load(DEFAULT_PLUGINS)["plugins"]


def test_the_picker_and_the_activator_take_the_admins_priority_not_the_gpu_placement():
    """Pods that serve no model run on CPU nodes: the user's tolerations, priority class,
    labels and annotations reach them; nodeSelector, affinity, spread and runtime class
    (the GPU pods' placement) and the GPU taint's toleration do not."""
    admin = {"nodeSelector": {"gpu": "h100"}, "runtimeClassName": "nvidia",
             "affinity": {"podAntiAffinity": {}},
             "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                                            "whenUnsatisfiable": "ScheduleAnyway"}],
             "tolerations": [{"key": "dedicated", "operator": "Exists"}],
             "priorityClassName": "inference-high", "podLabels": {"team": "a"},
             "podAnnotations": {"cost-center": "42"}}
    spec = {**FROM_ZERO, **admin, "routing": {"enabled": True}}
    children = built(spec, to_activator=True)
    for name in ("m-activator", "m-epp"):
        template = children[("Deployment", name)]["spec"]["template"]
        pod = template["spec"]
        assert pod["priorityClassName"] == "inference-high", name
        assert pod["tolerations"] == admin["tolerations"], name
        assert not {"nodeSelector", "affinity", "topologySpreadConstraints",
                    "runtimeClassName"} & set(pod), name
        assert template["metadata"]["labels"]["team"] == "a", name
        assert template["metadata"]["annotations"]["cost-center"] == "42", name
        kubernetes_validate.validate(children[("Deployment", name)], K8S_VERSION, strict=True)
    # The picker's own annotation (a new plugins config rolls it) stays.
    epp = children[("Deployment", "m-epp")]["spec"]["template"]["metadata"]["annotations"]
    assert "kubellm.io/plugins-config-sha256" in epp
