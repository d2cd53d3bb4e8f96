"""Session-wide fixtures: one model cache for the whole run and tiny random checkpoints of
every Llama-family variant, written with ``save_pretrained`` like real ones."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

import torch  # noqa: E402  (torch does not import triton; transformers' models do)

# Without a GPU, Triton kernels run on CPU tensors through its interpreter, which must be
# chosen before the first `import triton` in the process (it is read at decoration time).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

CACHE = Path(os.environ.get("KUBELLM_TEST_CACHE",
                            Path(__file__).resolve().parent.parent / ".cache" / "tests"))
os.environ["KUBELLM_CACHE"] = str(CACHE)


@pytest.fixture(scope="session")
def default_model_dir() -> str:
    """The embedded SmolLM2-135M-Instruct, converted once into the test cache."""
    from kubellm.runtime.loading.default_model import default_model_path
    return default_model_path()


@pytest.fixture(scope="session")
def tokenizer_dir(request) -> str:
    """The SmolLM2 tokenizer for the tiny models. ``KUBELLM_TEST_TOKENIZER_DIR`` points at
    a folder holding its files instead (the GPU machine has neither the GGUF package nor
    ``gguf``, and the 90 MB GGUF exceeds what travels there)."""
    override = os.environ.get("KUBELLM_TEST_TOKENIZER_DIR")
    if override:
        return override
    return request.getfixturevalue("default_model_dir")


@pytest.fixture(scope="session")
def tiny_model_factory(tmp_path_factory, tokenizer_dir):
    """``make(family) -> checkpoint dir`` for tiny random models (cached per family)."""
    from benchmarks.common.tiny_models import write_tiny_model
    root = tmp_path_factory.mktemp("tiny-models")
    made: dict[str, str] = {}

    def make(family: str = "llama") -> str:
        if family not in made:
            made[family] = write_tiny_model(family, root / family, tokenizer_dir)
        return made[family]
    return make


@pytest.fixture(scope="session")
def tiny_model_dir(tiny_model_factory) -> str:
    """A tiny random Llama checkpoint with the SmolLM2 tokenizer."""
    return tiny_model_factory("llama")
