"""``spec.autoscaling`` of an LLMDeployment as one validated, immutable value.

The CRD's schema (operator/schema.py) already enforces types and minimums on the API
server; we validate again because the operator also meets objects the schema never saw
(an emulator, an old CRD), and a bad value must become a condition, not a crash.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

MODES = ("operator", "keda")


class InvalidAutoscalingSpec(ValueError):
    """A value in spec.autoscaling the autoscaler cannot act on; the message names it."""


# camelCase field in the CRD -> (attribute, type, default); the defaults match the CRD's.
_FIELDS: dict[str, tuple[str, type, Any]] = {
    "enabled": ("enabled", bool, False),
    "mode": ("mode", str, "operator"),
    "minReplicas": ("min_replicas", int, 1),
    "maxReplicas": ("max_replicas", int, 1),
    "targetQueueDepth": ("target_queue_depth", float, 8.0),
    "metricsWindowSeconds": ("metrics_window_seconds", float, 60.0),
    "scrapeIntervalSeconds": ("scrape_interval_seconds", float, 15.0),
    "scaleUpStabilizationSeconds": ("scale_up_stabilization_seconds", float, 0.0),
    "scaleDownStabilizationSeconds": ("scale_down_stabilization_seconds", float, 300.0),
    "maxScaleUpStep": ("max_scale_up_step", int, 4),
    "scaleToZeroAfterSeconds": ("scale_to_zero_after_seconds", float, 600.0),
}


@dataclasses.dataclass(frozen=True, slots=True)
class AutoscalingSpec:
    enabled: bool = False
    mode: str = "operator"
    min_replicas: int = 1
    max_replicas: int = 1
    target_queue_depth: float = 8.0             # waiting requests per replica
    metrics_window_seconds: float = 60.0
    scrape_interval_seconds: float = 15.0
    scale_up_stabilization_seconds: float = 0.0
    scale_down_stabilization_seconds: float = 300.0
    max_scale_up_step: int = 4
    scale_to_zero_after_seconds: float = 600.0  # idle time before 1 -> 0 (minReplicas 0)

    def __post_init__(self) -> None:
        def bad(field: str, why: str) -> InvalidAutoscalingSpec:
            return InvalidAutoscalingSpec(f"spec.autoscaling.{field} {why}")

        if self.mode not in MODES:
            raise bad("mode", f"must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.min_replicas < 0:
            raise bad("minReplicas", f"must be >= 0, got {self.min_replicas}")
        if self.max_replicas < max(1, self.min_replicas):
            raise bad("maxReplicas", f"({self.max_replicas}) must be >= 1 and >= "
                                     f"spec.autoscaling.minReplicas ({self.min_replicas})")
        if not self.target_queue_depth > 0 or not math.isfinite(self.target_queue_depth):
            raise bad("targetQueueDepth", f"must be a number > 0, got {self.target_queue_depth}")
        if not self.metrics_window_seconds > 0:
            raise bad("metricsWindowSeconds", f"must be > 0, got {self.metrics_window_seconds}")
        if not self.scrape_interval_seconds > 0:
            raise bad("scrapeIntervalSeconds", f"must be > 0, got {self.scrape_interval_seconds}")
        if self.scale_up_stabilization_seconds < 0:
            raise bad("scaleUpStabilizationSeconds",
                      f"must be >= 0, got {self.scale_up_stabilization_seconds}")
        if self.scale_down_stabilization_seconds < 0:
            raise bad("scaleDownStabilizationSeconds",
                      f"must be >= 0, got {self.scale_down_stabilization_seconds}")
        if self.max_scale_up_step < 1:
            raise bad("maxScaleUpStep", f"must be >= 1, got {self.max_scale_up_step}")
        if not self.scale_to_zero_after_seconds > 0:
            raise bad("scaleToZeroAfterSeconds",
                      f"must be > 0, got {self.scale_to_zero_after_seconds}")

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None) -> AutoscalingSpec:
        """Parse ``spec.autoscaling`` of an LLMDeployment (the whole spec is passed)."""
        raw = (spec or {}).get("autoscaling") or {}
        if not isinstance(raw, Mapping):
            raise InvalidAutoscalingSpec(f"spec.autoscaling must be an object, got {raw!r}")
        values: dict[str, Any] = {}
        for key, (attr, kind, default) in _FIELDS.items():
            value = raw.get(key, default)
            values[attr] = _coerce(key, value, kind)
        return cls(**values)

    @property
    def scales_to_zero(self) -> bool:
        return self.min_replicas == 0

    @property
    def retention_seconds(self) -> float:
        """How far back the history must reach: every window the stabilization looks at."""
        stabilization = max(self.scale_up_stabilization_seconds,
                            self.scale_down_stabilization_seconds,
                            self.scale_to_zero_after_seconds if self.scales_to_zero else 0.0)
        return self.metrics_window_seconds + stabilization + self.scrape_interval_seconds


def _coerce(key: str, value: Any, kind: type) -> Any:
    # bool is an int in Python; a YAML `true` must not pass as minReplicas: 1.
    if kind is bool:
        if isinstance(value, bool):
            return value
    elif kind is str:
        if isinstance(value, str):
            return value
    elif isinstance(value, bool):
        pass
    elif kind is int and isinstance(value, int):
        return value
    elif kind is int and isinstance(value, float) and value.is_integer():
        return int(value)
    elif kind is float and isinstance(value, (int, float)):
        return float(value)
    raise InvalidAutoscalingSpec(
        f"spec.autoscaling.{key} must be a {kind.__name__}, got {value!r}")
