"""The CRD: generated from operator/schema.py, structurally valid, rules that work."""
from __future__ import annotations


import celpy
import kubernetes_validate
import pytest
import yaml

from kubellm.operator.autoscaling.keda import HPA_MAX_STABILIZATION_SECONDS
from kubellm.operator.crd import build_crd, render_crd
from kubellm.operator.rules import RULES, broken_rules
from kubellm.operator.schema import SPEC
from kubellm.operator.validation import SpecError, apply_defaults, defaulted_spec

from tests.paths import ROOT
MINIMAL = {"model": {"source": {"huggingFace": "Qwen/Qwen2.5-0.5B-Instruct"}}}


def test_crds_folder_holds_the_generated_crd():
    committed = (ROOT / "crds" / "llmdeployment.yaml").read_text()
    assert committed == render_crd(), \
        "crds/ is stale: run `python -m kubellm.operator.crd crds/llmdeployment.yaml`"


def test_crd_is_a_valid_customresourcedefinition():
    kubernetes_validate.validate(build_crd(), "1.31.0", strict=True)


def _walk(schema, path="spec"):
    yield path, schema
    for key, sub in schema.get("properties", {}).items():
        yield from _walk(sub, f"{path}.{key}")
    if "items" in schema:
        yield from _walk(schema["items"], f"{path}[]")


def test_every_field_is_described():
    undocumented = [path for path, s in _walk(SPEC) if not s.get("description")
                    and not path.endswith("[]")]
    assert undocumented == []


def test_crd_names_subresources_and_printer_columns():
    spec = build_crd()["spec"]
    assert spec["names"]["shortNames"] == ["llmd"] and spec["scope"] == "Namespaced"
    version = spec["versions"][0]
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector"}
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns[:6] == ["Model", "TP", "PP", "Desired", "Ready", "Queue"]
    assert columns[-1] == "Age"


def test_defaults_fill_nested_objects():
    spec = defaulted_spec(MINIMAL)
    assert spec["parallelism"] == {"tensor": 1, "pipeline": 1, "gpusPerNode": 8}
    assert spec["replicas"] == 1
    assert spec["autoscaling"]["enabled"] is False
    assert spec["autoscaling"]["targetQueueDepth"] == 8
    assert spec["autoscaling"]["scaleDownStabilizationSeconds"] == 300
    assert spec["autoscaling"]["mode"] == "operator"
    assert spec["resources"]["gpuResourceName"] == "nvidia.com/gpu"
    assert spec["service"] == {"type": "ClusterIP", "port": 8000}
    # Values given by the user are kept.
    assert apply_defaults(SPEC, {"parallelism": {"tensor": 4}})["parallelism"]["tensor"] == 4


@pytest.mark.parametrize("patch, field", [
    ({"parallelism": {"tensor": 0}}, "spec.parallelism.tensor"),
    ({"parallelism": {"pipeline": 0}}, "spec.parallelism.pipeline"),
    ({"replicas": -1}, "spec.replicas"),
    ({"model": {"source": {"huggingFace": "a/b"}, "dtype": "int3"}}, "spec.model.dtype"),
    ({"engine": {"gpuMemoryUtilization": 1.5}}, "spec.engine.gpuMemoryUtilization"),
    ({"engine": {"schedulingPolicy": "lifo"}}, "spec.engine.schedulingPolicy"),
    ({"autoscaling": {"targetQueueDepth": 0}}, "spec.autoscaling.targetQueueDepth"),
    ({"autoscaling": {"mode": "hpa"}}, "spec.autoscaling.mode"),
    ({"autoscaling": {"minReplicas": 3, "maxReplicas": 2}}, "spec.autoscaling.minReplicas"),
    ({"autoscaling": {"enabled": True, "maxReplicas": 2}, "replicas": 5}, "spec.replicas"),
    ({"model": {"source": {}}}, "spec.model.source"),
    ({"model": {"source": {"huggingFace": "a", "pvc": {"claimName": "c"}}}},
     "spec.model.source"),
])
def test_bad_specs_fail_naming_the_field(patch, field):
    with pytest.raises(SpecError, match=field.replace(".", r"\.")):
        defaulted_spec({**MINIMAL, **patch})


def test_spec_must_be_an_object():
    with pytest.raises(SpecError, match="spec: must be an object"):
        defaulted_spec(None)


SAMPLES = [
    MINIMAL,
    {"model": {"source": {"pvc": {"claimName": "w"}}}},
    {"model": {"source": {}}},
    {"model": {"source": {"huggingFace": "a", "pvc": {"claimName": "w"}}}},
    {**MINIMAL, "autoscaling": {"minReplicas": 2, "maxReplicas": 4}},
    {**MINIMAL, "autoscaling": {"minReplicas": 5, "maxReplicas": 4}},
    {**MINIMAL, "replicas": 9, "autoscaling": {"enabled": True, "maxReplicas": 4}},
    {**MINIMAL, "replicas": 0, "autoscaling": {"enabled": True, "maxReplicas": 4}},
    {**MINIMAL, "replicas": 3, "autoscaling": {"enabled": True, "maxReplicas": 4}},
    {**MINIMAL, "replicas": 9, "autoscaling": {"enabled": False, "maxReplicas": 4}},
    {"model": {"source": {"huggingFace": "a"}, "cache": {}}},
    {"model": {"source": {"pvc": {"claimName": "w"}}, "cache": {}}},
    {"model": {"source": {"huggingFace": "a"}, "cache": {"claimName": "c", "size": "9Gi"}}},
    {"model": {"source": {"huggingFace": "a"}, "cache": {"claimName": "c"}}},
    {**MINIMAL, "podLabels": {"team": "a", "app.kubernetes.io/part-of": "chat"}},
    {**MINIMAL, "podLabels": {"kubellm.io/role": "leader"}},
    {**MINIMAL, "podLabels": {"app.kubernetes.io/instance": "other"}},
]


@pytest.mark.parametrize("sample", SAMPLES)
def test_cel_rules_and_their_python_twins_agree(sample):
    """The API server runs the CEL; the operator runs the Python. Same verdicts."""
    spec = apply_defaults(SPEC, sample)
    env = celpy.Environment()
    cel_broken = []
    for rule in RULES:
        node = spec
        for key in rule.path:
            node = node.get(key)
            if node is None:
                break
        if node is None:
            continue  # the server runs a rule only where its field is present
        verdict = env.program(env.compile(rule.cel)).evaluate({"self": celpy.json_to_cel(node)})
        if not verdict:
            cel_broken.append(rule.message)
    assert cel_broken == broken_rules(spec)


def test_rule_messages_name_their_fields():
    for rule in RULES:
        assert rule.message.startswith("spec."), rule.message


def test_crd_yaml_round_trips():
    assert yaml.safe_load(render_crd()) == build_crd()


@pytest.mark.parametrize("field", ["scaleUpStabilizationSeconds",
                                   "scaleDownStabilizationSeconds"])
def test_stabilization_fields_state_the_keda_limit(field):
    version = build_crd()["spec"]["versions"][0]
    described = (version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
                 ["autoscaling"]["properties"][field]["description"])
    assert f"At most {HPA_MAX_STABILIZATION_SECONDS} seconds in keda mode" in described
