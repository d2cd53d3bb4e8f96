"""kubellm.runtime: the inference engine (and, in ``server/``, its HTTP front end).

``from kubellm.runtime import LLM, SamplingParams`` is the offline API.
"""
from kubellm.runtime.sampling_params import SamplingParams

__all__ = ["LLM", "LLMEngine", "EngineConfig", "SamplingParams"]


def __getattr__(name):  # torch-heavy names load on first use
    if name == "LLM":
        from kubellm.runtime.llm import LLM
        return LLM
    if name == "LLMEngine":
        from kubellm.runtime.engine import LLMEngine
        return LLMEngine
    if name == "EngineConfig":
        from kubellm.runtime.config import EngineConfig
        return EngineConfig
    raise AttributeError(name)
