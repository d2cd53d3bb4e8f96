"""Sampling defaults from the model's ``generation_config.json``, as vLLM's
``--generation-config auto`` applies them: a request that leaves temperature, top_p,
top_k, min_p, repetition_penalty or max_tokens unset gets the model's value."""
from __future__ import annotations

import json
import os

from kubellm.runtime.config_sources import ConfigError

# generation_config.json key -> SamplingParams field
_KEYS = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
         "repetition_penalty": "repetition_penalty", "max_new_tokens": "max_tokens"}


def load_generation_defaults(setting: str, model_dir: str) -> dict:
    """{SamplingParams field: value}; ``setting`` is auto (the model's file), vllm (no
    defaults) or a directory holding a generation_config.json."""
    if setting == "vllm":
        return {}
    folder = model_dir if setting == "auto" else setting
    path = os.path.join(folder, "generation_config.json")
    if not os.path.isfile(path):
        if setting == "auto":
            return {}
        raise ConfigError("generation_config", f"no generation_config.json in {folder!r}")
    try:
        with open(path) as fh:
            data = json.load(fh)
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError("generation_config", f"cannot read {path}: {exc}") from None
    defaults = {ours: data[theirs] for theirs, ours in _KEYS.items()
                if isinstance(data.get(theirs), (int, float))
                and not isinstance(data.get(theirs), bool)}
    if "top_k" in defaults:
        defaults["top_k"] = int(defaults["top_k"])
    if "max_tokens" in defaults:
        defaults["max_tokens"] = int(defaults["max_tokens"])
    return defaults
