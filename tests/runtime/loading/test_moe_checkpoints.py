"""Mixture-of-experts checkpoints: expert tensors stacked at load from whichever shard
holds them, transformers' stacked layout read as well, and a missing expert named."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from kubellm.runtime import LLM, SamplingParams

PROMPTS = [[1000 + i, 2000 + 3 * i, 3000 + 7 * i, 4000] for i in range(3)]
PARAMS = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)


def _copy_tokenizer(src: str, dst: Path) -> None:
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(Path(src) / name, dst / name)


def _tokens(path: str) -> list[list[int]]:
    return [o.outputs[0].token_ids for o in LLM(path, dtype="float32").generate(PROMPTS, PARAMS)]


@pytest.fixture(scope="module")
def qwen2_moe(tiny_model_factory):
    path = tiny_model_factory("qwen2-moe")
    return path, _tokens(path)


def test_experts_split_over_shards_load_the_same(qwen2_moe, tmp_path):
    """Hub checkpoints split a layer's experts anywhere (transformers 4 sharded by
    tensor): deal the tensors round-robin over three shards with an index."""
    path, expected = qwen2_moe
    tensors = load_file(str(Path(path) / "model.safetensors"))
    shards: list[dict] = [{}, {}, {}]
    for i, name in enumerate(sorted(tensors)):
        shards[i % 3][name] = tensors[name]
    weight_map = {}
    for i, shard in enumerate(shards):
        file = f"model-{i + 1:05d}-of-00003.safetensors"
        save_file(shard, str(tmp_path / file))
        weight_map.update({name: file for name in shard})
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map}))
    expert_3 = {f for name, f in weight_map.items()
                if name.startswith("model.layers.0.mlp.experts.3.")}
    assert len(expert_3) == 3, "one expert's three projections sit in three shards"
    shutil.copy(Path(path) / "config.json", tmp_path / "config.json")
    _copy_tokenizer(path, tmp_path)
    assert _tokens(str(tmp_path)) == expected


def test_transformers_stacked_layout_loads_the_same(qwen2_moe, tmp_path):
    """transformers >= 5 holds experts as [E, 2I, H] / [E, H, I] tensors in memory; a
    state dict saved as it is has those names."""
    from transformers import AutoModelForCausalLM
    path, expected = qwen2_moe
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    state = {k: v.contiguous() for k, v in model.state_dict().items()
             if k != "lm_head.weight"}          # tied to the embedding
    assert "model.layers.0.mlp.experts.gate_up_proj" in state
    save_file(state, str(tmp_path / "model.safetensors"))
    shutil.copy(Path(path) / "config.json", tmp_path / "config.json")
    _copy_tokenizer(path, tmp_path)
    assert _tokens(str(tmp_path)) == expected


def test_a_checkpoint_missing_an_expert_is_refused_by_name(qwen2_moe, tmp_path):
    path, _ = qwen2_moe
    tensors = load_file(str(Path(path) / "model.safetensors"))
    del tensors["model.layers.2.mlp.experts.3.up_proj.weight"]
    save_file(tensors, str(tmp_path / "model.safetensors"))
    shutil.copy(Path(path) / "config.json", tmp_path / "config.json")
    _copy_tokenizer(path, tmp_path)
    with pytest.raises(ValueError, match=r"lacks expert weights: \[\(3, 'up'\)\]"):
        LLM(str(tmp_path), dtype="float32")
