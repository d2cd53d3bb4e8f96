"""Checkpoint architecture -> our model class."""
from __future__ import annotations

from kubellm.runtime.models.llama import LlamaArgs, LlamaForCausalLM

# every entry is a Llama-family variant; LlamaArgs.from_hf reads the differences
SUPPORTED = {
    "LlamaForCausalLM": LlamaForCausalLM,
    "MistralForCausalLM": LlamaForCausalLM,
    "Qwen2ForCausalLM": LlamaForCausalLM,
    "Qwen3ForCausalLM": LlamaForCausalLM,
}


# a config.json without "architectures" (a bare config.save_pretrained) names its family
MODEL_TYPES = {"llama": LlamaForCausalLM, "mistral": LlamaForCausalLM,
               "qwen2": LlamaForCausalLM, "qwen3": LlamaForCausalLM}


def resolve_architecture(hf_config):
    names = getattr(hf_config, "architectures", None) or []
    for name in names:
        if name in SUPPORTED:
            return SUPPORTED[name], LlamaArgs.from_hf(hf_config)
    if not names and getattr(hf_config, "model_type", None) in MODEL_TYPES:
        return MODEL_TYPES[hf_config.model_type], LlamaArgs.from_hf(hf_config)
    raise ValueError(f"model architecture {names or hf_config.model_type!r} is not supported; "
                     f"supported: {', '.join(SUPPORTED)}")
