"""Checkpoint architecture -> our model class and the function that reads its config."""
from __future__ import annotations

from kubellm.runtime.models.dots1 import Dots1ForCausalLM, dots1_args
from kubellm.runtime.models.llama import LlamaArgs, LlamaForCausalLM
from kubellm.runtime.models.mixtral import MixtralForCausalLM, mixtral_args
from kubellm.runtime.models.qwen_moe import QwenMoeForCausalLM, qwen_moe_args

_LLAMA = (LlamaForCausalLM, LlamaArgs.from_hf)   # LlamaArgs.from_hf reads the variants
_MIXTRAL = (MixtralForCausalLM, mixtral_args)
_QWEN_MOE = (QwenMoeForCausalLM, qwen_moe_args)
_DOTS1 = (Dots1ForCausalLM, dots1_args)

SUPPORTED = {
    "LlamaForCausalLM": _LLAMA,
    "MistralForCausalLM": _LLAMA,
    "Qwen2ForCausalLM": _LLAMA,
    "Qwen3ForCausalLM": _LLAMA,
    "MixtralForCausalLM": _MIXTRAL,
    "Qwen2MoeForCausalLM": _QWEN_MOE,
    "Qwen3MoeForCausalLM": _QWEN_MOE,
    "Dots1ForCausalLM": _DOTS1,
}


# a config.json without "architectures" (a bare config.save_pretrained) names its family
MODEL_TYPES = {"llama": _LLAMA, "mistral": _LLAMA, "qwen2": _LLAMA, "qwen3": _LLAMA,
               "mixtral": _MIXTRAL, "qwen2_moe": _QWEN_MOE, "qwen3_moe": _QWEN_MOE,
               "dots1": _DOTS1}


def resolve_architecture(hf_config):
    names = getattr(hf_config, "architectures", None) or []
    for name in names:
        if name in SUPPORTED:
            cls, read_args = SUPPORTED[name]
            return cls, read_args(hf_config)
    if not names and getattr(hf_config, "model_type", None) in MODEL_TYPES:
        cls, read_args = MODEL_TYPES[hf_config.model_type]
        return cls, read_args(hf_config)
    raise ValueError(f"model architecture {names or hf_config.model_type!r} is not supported; "
                     f"supported: {', '.join(SUPPORTED)}")
