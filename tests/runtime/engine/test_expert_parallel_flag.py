"""--enable-expert-parallel where it cannot act says so instead of passing in silence."""
from __future__ import annotations

import logging

from kubellm.runtime import LLM
from kubellm.runtime.config import EngineConfig
from kubellm.runtime.config_sources import resolve


def test_flag_in_one_process_is_reported_as_without_effect(tiny_model_factory, caplog):
    with caplog.at_level(logging.WARNING, logger="kubellm.runtime.assembly"):
        LLM(tiny_model_factory("qwen3-moe"), dtype="float32", enable_expert_parallel=True)
    assert "enable_expert_parallel has no effect with tensor_parallel_size=1" in caplog.text


def test_flag_from_env_and_cli():
    assert resolve(EngineConfig, env={"KUBELLM_ENABLE_EXPERT_PARALLEL": "true"}) \
        .enable_expert_parallel is True
    assert EngineConfig().enable_expert_parallel is False
