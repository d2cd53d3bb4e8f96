"""Whose an object is: the rule that keeps the operator off objects it does not control.

Pure functions of plain dicts, importable from anywhere in the operator (the builders, the
reconciler and the autoscaler's ScaledObject calls all apply the same rule).
"""
from __future__ import annotations

from typing import Any


def is_controlled_by(obj: dict[str, Any], owner_uid: str) -> bool:
    """Whether ``owner_uid`` is the object's controller (the one reference that may change it)."""
    refs = obj.get("metadata", {}).get("ownerReferences") or []
    return any(ref.get("uid") == owner_uid and ref.get("controller") for ref in refs)


class NameConflict(Exception):
    """An object with a child's name exists and is not this LLMDeployment's to change."""

    def __init__(self, desired: dict[str, Any]):
        meta = desired["metadata"]
        self.kind, self.name = desired["kind"], meta["name"]
        super().__init__(f"{self.kind} {meta['namespace']}/{self.name} already exists and is "
                         "not controlled by this LLMDeployment; the operator leaves it alone "
                         "(rename the LLMDeployment or remove that object)")
