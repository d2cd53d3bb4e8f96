"""kubellm.runtime: the inference engine and its OpenAI-compatible server.

``from kubellm.runtime import LLM, SamplingParams`` is the offline API. The folders, from
the bottom up (each may import only those listed before it, and kubellm.kernels):

- ``config.py``, ``config_sources.py``: EngineConfig and how defaults, YAML, KUBELLM_* env
  and flags combine into it (used by everything below).
- ``core/``: requests, the KV-block manager, the scheduler, outputs; never a tensor.
- ``parallel/``: this process's ranks, process groups and collectives.
- ``attention/``: paged-attention metadata and backends (torch, Triton).
- ``layers/``, ``models/``: the model code (parallel linears, one file per family).
- ``loading/``: checkpoints and the embedded default model.
- ``worker/``: the device side of a process: inputs, forward, sampling, CUDA graphs.
- ``assembly.py``: what a single-process and a distributed engine are both built from.
- ``distributed/``: tensor- and pipeline-parallel ranks over torch.distributed.
- ``engine/``: LLMEngine, the offline LLM API, and the builder that picks an assembly.
- ``engine_core/``: the engine in its own process, and the client front ends reach it with.
- ``server/``: the HTTP front ends and the supervisor of ``kubellm serve``; ``cli/`` (with
  ``cli/bench``): the ``kubellm`` commands.

The runtime never imports kubellm.operator: the two meet only in the contract of flags,
env variables, ports and metric names, which tests/contract holds.
"""
from kubellm.runtime.core.errors import EngineDeadError
from kubellm.runtime.core.sampling_params import SamplingParams

__all__ = ["LLM", "LLMEngine", "EngineConfig", "SamplingParams", "EngineDeadError"]


def __getattr__(name):  # torch-heavy names load on first use
    if name == "LLM":
        from kubellm.runtime.engine.llm import LLM
        return LLM
    if name == "LLMEngine":
        from kubellm.runtime.engine.llm_engine import LLMEngine
        return LLMEngine
    if name == "EngineConfig":
        from kubellm.runtime.config import EngineConfig
        return EngineConfig
    raise AttributeError(name)
