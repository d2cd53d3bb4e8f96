"""Validate the objects kubellm emits for other projects against those projects' real CRDs.

The CRDs are data files published by KEDA, LeaderWorkerSet and the Gateway API Inference
Extension. They live outside this repository (``../shared/thirdparty-crds`` beside the
checkout, or ``$KUBELLM_THIRDPARTY_CRDS``) and are never copied into it; tests that need
one skip, saying so, where the folder is absent.

``crd_errors(obj)`` does what the API server does with a create under strict field
validation (``kubectl apply``'s default): fill the schema's defaults, reject fields the
schema does not know (they would be pruned), validate types and bounds, then run the
CRD's CEL rules.
"""
from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.operator.apiserver_crd import rule_errors_on_value
from tests.paths import ROOT

FILES = {
    ("keda.sh", "ScaledObject"): "keda.sh_scaledobjects.yaml",
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"):
        "leaderworkerset.x-k8s.io_leaderworkersets.yaml",
    ("inference.networking.k8s.io", "InferencePool"):
        "inference.networking.k8s.io_inferencepools.yaml",
}


def crds_dir() -> Path:
    return Path(os.environ.get("KUBELLM_THIRDPARTY_CRDS")
                or ROOT.parent / "shared" / "thirdparty-crds")


def load_crd(group: str, kind: str) -> dict[str, Any]:
    path = crds_dir() / FILES[(group, kind)]
    if not path.is_file():
        pytest.skip(reason=f"{kind}'s CRD is not here ({path}): put the projects' published CRDs "
                           "in ../shared/thirdparty-crds or point KUBELLM_THIRDPARTY_CRDS at them")
    return yaml.safe_load(path.read_text())


def _version_schema(crd: dict[str, Any], version: str) -> dict[str, Any]:
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version and entry.get("served", True):
            return entry["schema"]["openAPIV3Schema"]
    raise AssertionError(f"{crd['metadata']['name']} serves no version {version}")


def _closed(schema: Any) -> Any:
    """Unknown fields forbidden wherever the server would prune them."""
    if isinstance(schema, list):
        return [_closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _closed(v) for k, v in schema.items()}
    if "properties" in out and "additionalProperties" not in out and \
            not schema.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


def _with_defaults(schema: dict[str, Any], value: Any) -> Any:
    if isinstance(value, dict) and schema.get("type") == "object":
        for key, sub in (schema.get("properties") or {}).items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                value[key] = _with_defaults(sub, value[key])
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        value = [_with_defaults(schema["items"], v) for v in value]
    return value


def crd_errors(obj: dict[str, Any]) -> list[str]:
    """Why the owning project's CRD would refuse ``obj`` (empty when it accepts it)."""
    group, version = obj["apiVersion"].split("/")
    schema = _version_schema(load_crd(group, obj["kind"]), version)
    # The server validates metadata itself (ObjectMeta), not through the CRD's schema.
    body = _with_defaults(schema, {k: copy.deepcopy(v) for k, v in obj.items()
                                   if k != "metadata"})
    schema = {k: v for k, v in schema.items() if k != "properties"} | {
        "properties": {k: v for k, v in schema.get("properties", {}).items()
                       if k != "metadata"}}
    errors = [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
              for e in jsonschema.Draft4Validator(_closed(schema)).iter_errors(body)]
    return errors or rule_errors_on_value(schema, body)
