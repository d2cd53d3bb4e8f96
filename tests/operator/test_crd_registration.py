"""The CRD passes what kube-apiserver checks when it registers a CRD (see apiserver_crd.py).

Each test names the server behaviour it stands for. The first real install failed on
the rule check of ``autoscaling``'s default ``{}``; ``test_unguarded_rule_on_a_default_
is_refused`` keeps that exact CRD as a planted case, so the checker is shown to fail.
"""
from __future__ import annotations

import copy

import pytest

from kubellm.operator.crd import build_crd
from kubellm.operator.rules import RULES

from .apiserver_crd import (PER_RULE_COST_LIMIT, cel_errors, default_errors,
                            registration_errors, rule_errors_on_value, structural_errors)


def _schema(crd=None) -> dict:
    return (crd or build_crd())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _node(schema: dict, *path: str) -> dict:
    for key in path:
        schema = schema["properties"][key]
    return schema


def test_kubellm_crd_registers():
    """Server: the whole registration validation (structural, defaults, CEL) passes."""
    assert registration_errors(build_crd()) == []


def test_unguarded_rule_on_a_default_is_refused():
    """Server: rules run on the raw default ``{}`` of autoscaling at registration; the
    rule the first release shipped (no has() guard) made the real server refuse the CRD
    with "no such key: minReplicas"."""
    crd = build_crd()
    autoscaling = _node(_schema(crd), "spec", "autoscaling")
    autoscaling["x-kubernetes-validations"] = [{
        "rule": "self.minReplicas <= self.maxReplicas",
        "message": "spec.autoscaling.minReplicas must be <= spec.autoscaling.maxReplicas"}]
    errors = default_errors(_schema(crd))
    assert any("spec.autoscaling.default" in e and "minReplicas" in e for e in errors), errors


def test_every_rule_runs_on_every_default_in_its_scope():
    """Server: each default is validated with the rules of its subtree. Beyond today's
    defaults, every rule must *evaluate* (true or false, never an error) on an empty
    object, so that a default added later cannot break registration."""
    schema = _schema()
    for rule in RULES:
        node = _node(schema, "spec", *rule.path)
        errors = rule_errors_on_value(node, {})
        assert not [e for e in errors if "evaluating rule" in e], rule.cel


def test_default_that_breaks_its_own_schema_is_refused():
    """Server: a default must validate against the schema it sits in."""
    crd = build_crd()
    _node(_schema(crd), "spec", "service", "port")["default"] = 0
    _node(_schema(crd), "spec", "autoscaling")["default"] = {"surprise": 1}
    errors = default_errors(_schema(crd))
    assert any("spec.service.port.default" in e for e in errors), errors
    assert any("spec.autoscaling.default" in e and "pruned" in e for e in errors), errors


def test_schema_is_structural():
    """Server: a non-structural schema is refused outright (apiextensions/v1)."""
    assert structural_errors(_schema()) == []


@pytest.mark.parametrize("plant, expected", [
    (lambda s: _node(s, "spec", "replicas").pop("type"), "spec.replicas: type"),
    (lambda s: _node(s, "spec", "service").__setitem__("additionalProperties",
                                                       {"type": "string"}),
     "mutually exclusive"),
    (lambda s: _node(s, "spec", "engine", "extraArgs").pop("items"),
     "items: Required"),
    (lambda s: _node(s, "spec", "model").__setitem__(
        "anyOf", [{"type": "object", "required": ["name"]}]), "spec.model.anyOf"),
    (lambda s: _node(s, "status", "conditions")["items"]["required"].remove("type"),
     "map key type"),
], ids=["untyped", "props-and-additional", "array-without-items", "typed-junctor",
        "map-key-optional"])
def test_structural_violations_are_refused(plant, expected):
    schema = copy.deepcopy(_schema())
    plant(schema)
    errors = structural_errors(schema)
    assert any(expected in e for e in errors), errors


def test_rules_name_only_declared_fields():
    """Server: rules are type-checked against the schema; an undefined field is refused."""
    crd = build_crd()
    _node(_schema(crd), "spec", "autoscaling")["x-kubernetes-validations"].append(
        {"rule": "self.minReplica <= 3", "message": "typo"})
    assert any("undefined field 'minReplica'" in e for e in cel_errors(_schema(crd)))


def test_rules_that_do_not_compile_are_refused():
    crd = build_crd()
    _node(_schema(crd), "spec")["x-kubernetes-validations"].append(
        {"rule": "self.replicas <=", "message": "broken"})
    assert any("does not compile" in e for e in cel_errors(_schema(crd)))


def test_rule_cost_stays_within_the_budget():
    """Server: rules that iterate unbounded lists or scan unbounded strings exceed the
    estimated cost budget and are refused; bounded ones are accepted."""
    crd = build_crd()
    extra_args = _node(_schema(crd), "spec", "engine", "extraArgs")
    extra_args["x-kubernetes-validations"] = [
        {"rule": "self.all(a, a.matches('^--[a-z-]+'))", "message": "flags only"}]
    errors = cel_errors(_schema(crd))
    assert any("exceeds the per-rule budget" in e for e in errors), errors
    extra_args["maxItems"] = 64
    extra_args["items"]["maxLength"] = 256
    assert cel_errors(_schema(crd)) == []
    assert PER_RULE_COST_LIMIT == 10_000_000  # the server's StaticEstimatedCostLimit
