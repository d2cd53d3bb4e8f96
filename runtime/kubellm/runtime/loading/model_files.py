"""A model's config and tokenizer, from a Hugging Face directory or a GGUF file (whose
metadata carries both; a directory with config.json and tokenizer files beside its GGUF,
like the embedded default model's, is read as a Hugging Face directory)."""
from __future__ import annotations

import os

from kubellm.runtime.loading.quantized.gguf_checkpoint import find_gguf


def _gguf_only(model_dir: str):
    """The GGUF file to read config or tokenizer from, when nothing else says them."""
    if os.path.isdir(model_dir) and os.path.exists(os.path.join(model_dir, "config.json")):
        return None
    return find_gguf(model_dir)


def load_hf_config(model_dir: str):
    from transformers import AutoConfig
    gguf = _gguf_only(model_dir)
    if gguf is None:
        return AutoConfig.from_pretrained(model_dir)
    return AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)


def load_tokenizer_from(path: str):
    from transformers import AutoTokenizer
    gguf = _gguf_only(path) if not os.path.exists(os.path.join(path, "tokenizer.json")) else None
    if gguf is None:
        return AutoTokenizer.from_pretrained(path)
    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)


def transformers_source(model_dir: str) -> tuple[str, dict]:
    """(path, extra from_pretrained arguments) for transformers to load the same weights:
    a GGUF's weights are only in the GGUF file."""
    import glob
    gguf = find_gguf(model_dir)
    if gguf is None or glob.glob(os.path.join(model_dir, "*.safetensors")):
        return model_dir, {}
    return str(gguf.parent), {"gguf_file": gguf.name}
