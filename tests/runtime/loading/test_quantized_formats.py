"""Every quantized format, on tiny checkpoints written by the real tools (checkpoints/,
made by checkpoints/make_checkpoints.py; tools and versions in checkpoints/README.md):

- weights: what our readers put in the common layout equals the format's reference
  dequantization of the same file (gguf's own dequantizer for GGUF; for GPTQ / AWQ /
  compressed-tensors, whose tools do not install beside our pins, the proven pure-torch
  dequantizers in quant_reference.py);
- model: our logits against transformers' on the same checkpoint in float32 (GGUF: loaded
  here; the others: logits transformers computed in the tool's environment, stored in
  transformers-reference/logits.safetensors), and our greedy tokens against transformers' greedy tokens.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from kubellm.runtime import LLM, SamplingParams
from kubellm.runtime.loading.quantized.gguf_checkpoint import GGUFCheckpoint
from tests.runtime.loading import quant_reference as ref
from benchmarks.common.model_logits import load, prompt_logits, same_positions

CHECKPOINTS = Path(__file__).parent / "checkpoints"
GGUF_TYPES = ["Q4_0", "Q4_1", "Q8_0", "Q4_K"]
SAFETENSORS = ["gptq-descact", "gptq-asym", "awq-gemm", "ct-w4a16", "ct-w4a16-asym"]
PROMPT = [1, 45, 120, 77, 250, 9, 33, 180, 61, 5, 140, 99]
# Logit tolerance against transformers' own loader, relative to the largest logit (~11
# here). GPTQ / AWQ: transformers' exact CPU kernels (TorchLinear, AwqTorchLinear) round
# activations to fp16: 0.2-0.4% measured; GGUF and compressed-tensors dequantize to
# float32 as we do (summation order only). Against a float32 transformers Llama holding
# the reference dequantization of the same weights: 1e-5.
LOGIT_RTOL = {"gguf": 1e-4, "gptq": 1e-2, "awq": 1e-2, "ct": 1e-4}


def gguf_path(kind: str) -> Path:
    return CHECKPOINTS / "gguf" / f"tiny-{kind}.gguf"


# ---- GGUF ------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", GGUF_TYPES)
def test_gguf_weights_equal_gguf_dequantizer(kind):
    import gguf
    checkpoint = GGUFCheckpoint(gguf_path(kind))
    ours = dict(checkpoint.tensors())
    heads = {"attn_q": 4, "attn_k": 2}
    checked = 0
    for t in checkpoint.reader.tensors:
        if t.tensor_type.name != kind:
            continue
        expected = torch.from_numpy(gguf.quants.dequantize(t.data, t.tensor_type).copy())
        role = t.name.split(".")[-2] if t.name.startswith("blk.") else None
        if role in heads:   # the file's rows are permuted for llama.cpp's rotary layout
            n = heads[role]
            expected = expected.reshape(n, -1, 2, expected.shape[1]).transpose(1, 2) \
                .reshape(expected.shape)
        name = {"token_embd.weight": "model.embed_tokens.weight"}.get(t.name)
        if name is None:
            layer, sub = t.name.split(".")[1], t.name.split(".")[2]
            name = next(n for n in ours if n.startswith(f"model.layers.{layer}.") and
                        n.endswith({"attn_q": "q_proj.weight", "attn_k": "k_proj.weight",
                                    "attn_v": "v_proj.weight", "attn_output": "o_proj.weight",
                                    "ffn_gate": "gate_proj.weight", "ffn_up": "up_proj.weight",
                                    "ffn_down": "down_proj.weight"}[sub]))
        value = ours[name]
        got = value if isinstance(value, torch.Tensor) else value.dequantize()
        torch.testing.assert_close(got, expected, atol=1e-7, rtol=1e-6)
        checked += 1
    assert checked == 8   # 7 linears + the embedding


@pytest.fixture(scope="module")
def transformers_gguf():
    """transformers' own GGUF loader (float32) on each file: logits and greedy tokens."""
    from transformers import AutoModelForCausalLM
    out = {}
    for kind in GGUF_TYPES:
        path = gguf_path(kind)
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name,
                                                     dtype=torch.float32).eval()
        ids = torch.tensor([PROMPT])
        with torch.no_grad():
            logits = model(ids).logits[0]
            greedy = model.generate(ids, max_new_tokens=16, min_new_tokens=16, do_sample=False,
                                    pad_token_id=0)[0, len(PROMPT):]
        out[kind] = logits, greedy.tolist()
    return out


@pytest.mark.parametrize("kind", GGUF_TYPES)
def test_gguf_model_matches_transformers(kind, transformers_gguf):
    path = str(gguf_path(kind))
    model = load(path)
    assert model.layers["0"].mlp.down_proj.quant_method is not None
    logits, greedy = transformers_gguf[kind]
    torch.testing.assert_close(prompt_logits(model, PROMPT), logits, rtol=0,
                               atol=LOGIT_RTOL["gguf"] * logits.abs().max().item())
    llm = LLM(path, num_kv_blocks=16, skip_tokenizer_init=True)
    ours = llm.generate([PROMPT], SamplingParams(temperature=0, max_tokens=16,
                                                 ignore_eos=True))[0].outputs[0].token_ids
    assert same_positions(ours, greedy) >= 0.9, (ours, greedy)


# ---- GPTQ, AWQ, compressed-tensors -----------------------------------------------------
def linear_weights(name: str) -> dict[str, torch.Tensor]:
    """HF weight name -> the reference dequantization of each quantized linear."""
    d = CHECKPOINTS / name
    tensors = load_file(str(d / "model.safetensors"))
    qc = json.loads((d / "config.json").read_text())["quantization_config"]
    out = {}
    marker = "weight_packed" if qc["quant_method"] == "compressed-tensors" else "qweight"
    for key in tensors:
        if not key.endswith("." + marker):
            continue
        p = key[:-len(marker) - 1]
        part = lambda s: tensors.get(f"{p}.{s}")  # noqa: E731
        if qc["quant_method"] == "gptq":
            w = ref.dequant_gptq(part("qweight"), part("qzeros"), part("scales"),
                                 part("g_idx") if qc["desc_act"] else None,
                                 group_size=qc["group_size"])
        elif qc["quant_method"] == "awq":
            w = ref.dequant_awq_gemm(part("qweight"), part("qzeros"), part("scales"),
                                     group_size=qc["group_size"])
        else:
            w = ref.dequant_ct_pack_quantized(part("weight_packed"), part("weight_scale"),
                                              part("weight_zero_point"), part("weight_shape"))
        out[p + ".weight"] = w
    return out


def float_model_logits(name: str, ids: torch.Tensor) -> torch.Tensor:
    """A float32 transformers Llama holding the checkpoint's float tensors and the
    reference dequantization of its quantized linears."""
    from transformers import AutoConfig, AutoModelForCausalLM
    d = CHECKPOINTS / name
    config = AutoConfig.from_pretrained(d)
    del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    state = {k: v.float() for k, v in load_file(str(d / "model.safetensors")).items()
             if k in model.state_dict()}
    state.update(linear_weights(name))
    missing = model.load_state_dict(state, strict=False).missing_keys
    assert set(missing) <= {"lm_head.weight"}, missing    # tied to the embedding
    with torch.no_grad():
        return model(ids[None]).logits[0]


@pytest.mark.parametrize("name", SAFETENSORS)
def test_safetensors_weights_equal_reference_dequantizer(name):
    from kubellm.runtime.loading.loader import checkpoint_files
    from kubellm.runtime.loading.model_files import load_hf_config
    from kubellm.runtime.loading.quantized.checkpoint import CheckpointSource
    d = str(CHECKPOINTS / name)
    source = CheckpointSource.open(d, load_hf_config(d), None)
    ours = {n: v for n, v in source.tensors(checkpoint_files(d), lambda n: True)
            if not isinstance(v, torch.Tensor) and hasattr(v, "dequantize")}
    expected = linear_weights(name)
    assert sorted(ours) == sorted(expected) and len(expected) == 7
    for n, w in expected.items():
        torch.testing.assert_close(ours[n].dequantize(), w, atol=1e-7, rtol=1e-6)


@pytest.mark.parametrize("name", SAFETENSORS)
def test_safetensors_model_matches_transformers(name):
    d = CHECKPOINTS / name
    reference = load_file(str(d / "transformers-reference" / "logits.safetensors"))
    model = load(str(d))
    assert model.layers["0"].self_attn.qkv_proj.quant_method is not None
    logits = prompt_logits(model, reference["input_ids"].tolist())
    expected = reference["logits"]
    torch.testing.assert_close(logits, expected, rtol=0, atol=LOGIT_RTOL[name.split("-")[0]]
                               * expected.abs().max().item())
    torch.testing.assert_close(logits, float_model_logits(name, reference["input_ids"]),
                               rtol=0, atol=1e-5 * expected.abs().max().item())
    llm = LLM(str(d), num_kv_blocks=16)
    ours = llm.generate([reference["input_ids"].tolist()], SamplingParams(
        temperature=0, max_tokens=16, ignore_eos=True))[0].outputs[0].token_ids
    greedy = reference["greedy"].tolist()
    assert same_positions(ours, greedy) >= 0.9, (ours, greedy)


def test_act_order_checkpoint_keeps_g_idx():
    model = load(str(CHECKPOINTS / "gptq-descact"))
    layer = model.layers["0"].self_attn.qkv_proj
    assert layer.g_idx is not None
    assert not torch.equal(layer.g_idx.long(), torch.arange(256) // 64)   # really reordered
    assert np.bincount(layer.g_idx.numpy()).tolist() == [64] * 4          # whole groups
