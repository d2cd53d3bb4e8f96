"""How long a runtime pod may take to start: the startup probe's budget.

From container start to /health answering, a pod downloads its weights (unless they sit
on a volume), loads them onto the GPUs, profiles the KV cache and captures CUDA graphs.
The budget grows with the part of the weights one pod loads, so a stuck 0.5B pod is
restarted in minutes while a 70B one downloading from the hub is left to finish.
spec.rollout.startupTimeoutSeconds overrides it.
"""
from __future__ import annotations

import math
from typing import Any

from kubellm.operator.builders.quantity import GI
from kubellm.operator.builders.sizing import parameter_count

PERIOD_SECONDS = 10
BASE_SECONDS = 300  # interpreter, CUDA context, KV profiling, CUDA graph capture
LOAD_SECONDS_PER_GIB = 4  # safetensors into GPU memory at >= 256 MiB/s (disk or network volume)
DOWNLOAD_SECONDS_PER_GIB = 16  # from the Hugging Face hub at >= 64 MiB/s
UNKNOWN_SIZE_SECONDS = 3600  # a model whose size nobody stated: an hour, as before sizing
CHECKPOINT_BYTES_PER_PARAMETER = 2


def downloads_at_start(spec: dict[str, Any]) -> bool:
    model = spec["model"]
    return "huggingFace" in model["source"] and "cache" not in model


def startup_seconds(spec: dict[str, Any], pods_per_replica: int = 1) -> int:
    given = spec.get("rollout", {}).get("startupTimeoutSeconds")
    if given:
        return int(given)
    params = parameter_count(spec)
    if params is None:
        return UNKNOWN_SIZE_SECONDS
    gib = params * CHECKPOINT_BYTES_PER_PARAMETER / GI / pods_per_replica
    per_gib = LOAD_SECONDS_PER_GIB + (DOWNLOAD_SECONDS_PER_GIB if downloads_at_start(spec)
                                      else 0)
    return BASE_SECONDS + math.ceil(gib * per_gib)


def startup_failure_threshold(seconds: int) -> int:
    return max(1, math.ceil(seconds / PERIOD_SECONDS))
