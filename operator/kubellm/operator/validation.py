"""Fill schema defaults into a spec and validate it, as the API server would.

The result is what every builder reads: a spec with all defaults present. Errors name
the field (``spec.parallelism.tensor: 0 is less than the minimum of 1``).
"""
from __future__ import annotations

import copy
from typing import Any

import jsonschema

from kubellm.operator.builders.sizing import size_errors
from kubellm.operator.rules import broken_rules
from kubellm.operator.schema import SPEC, Schema


class SpecError(ValueError):
    """A spec the operator cannot act on; the message names the field."""


def apply_defaults(schema: Schema, value: Any) -> Any:
    """Return a copy of ``value`` with the schema's defaults filled in, depth first."""
    value = copy.deepcopy(value)
    if schema.get("type") == "object" and isinstance(value, dict):
        for key, sub in schema.get("properties", {}).items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                value[key] = apply_defaults(sub, value[key])
    return value


def _field_path(error: jsonschema.ValidationError) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)


def defaulted_spec(spec: Any) -> dict[str, Any]:
    """Validate ``spec`` against the CRD schema and rules; return it with defaults."""
    if not isinstance(spec, dict):
        raise SpecError("spec: must be an object")
    full = apply_defaults(SPEC, spec)
    errors = sorted(jsonschema.Draft4Validator(SPEC).iter_errors(full),
                    key=lambda e: list(map(str, e.absolute_path)))
    messages = [f"spec{_field_path(e)}: {e.message}" for e in errors]
    if not messages:
        messages = broken_rules(full) + size_errors(full)
    if messages:
        raise SpecError("; ".join(messages))
    return full
