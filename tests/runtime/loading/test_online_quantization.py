"""quantization="4bit": a float checkpoint's linears quantized at load (group-wise int4),
and the startup errors of bad quantization settings (each names its field)."""
from __future__ import annotations

import pytest
import torch

from benchmarks.common.model_logits import dequantize_layers, load, prompt_logits
from kubellm.runtime import LLM, SamplingParams
from kubellm.runtime.config import EngineConfig
from kubellm.runtime.config_sources import ConfigError
from kubellm.runtime.parallel import state as ps

PROMPT = [5, 100, 2000, 7, 9, 11, 300, 42]


def test_online_4bit_runs_exactly_its_dequantized_weights(tiny_model_dir):
    model = load(tiny_model_dir, quantization="4bit", quantization_group_size=32)
    layers = [m for m in model.modules() if getattr(m, "quant_method", None) is not None]
    assert len(layers) == 2 * 4      # qkv, o, gate_up, down in each of 2 layers
    assert all(layer.weight is None and layer.qweight.dtype == torch.int32 for layer in layers)
    assert model.embed_tokens.weight.dtype == torch.float32   # embeddings stay float
    logits = prompt_logits(model, PROMPT)
    torch.testing.assert_close(logits, prompt_logits(dequantize_layers(model), PROMPT),
                               atol=1e-5, rtol=1e-5)


def test_online_4bit_holds_a_quarter_of_the_float_linears(tiny_model_dir):
    def linear_bytes(model):
        return sum(p.numel() * p.element_size() for n, p in model.named_parameters()
                   if "proj" in n and not n.endswith("bias"))
    float_bytes = linear_bytes(load(tiny_model_dir))
    quantized_bytes = linear_bytes(load(tiny_model_dir, quantization="4bit",
                                        quantization_group_size=32))
    # fp32 weights: 32 bits; 4-bit codes + an fp32 scale and bias per 32: 6 bits
    assert quantized_bytes * 32 == float_bytes * 6


def test_online_4bit_load_holds_one_float_weight_at_a_time(tiny_model_dir, monkeypatch):
    """Peak memory during an online 4-bit load: each float weight (this rank's slice, read
    lazily from the safetensors file) is quantized and freed before the next one is read,
    so the float model is never held whole, on the host or the device."""
    import weakref

    from kubellm.runtime.layers.quantization import linear_method
    alive: list[weakref.ref] = []
    calls = []
    real = linear_method.quantize_rtn

    def watched(weight, *args, **kwargs):
        still = [r() for r in alive if r() is not None]
        assert not still, f"{len(still)} float weights still alive when the next is quantized"
        alive.append(weakref.ref(weight))
        calls.append(weight.numel())
        return real(weight, *args, **kwargs)

    monkeypatch.setattr(linear_method, "quantize_rtn", watched)
    load(tiny_model_dir, quantization="4bit", quantization_group_size=32)
    assert len(calls) == 2 * 7     # q, k, v, o, gate, up, down of 2 layers: one at a time
    assert all(r() is None for r in alive)


def test_engine_generates_with_online_4bit(tiny_model_dir):
    llm = LLM(tiny_model_dir, quantization="4bit", quantization_group_size=32,
              num_kv_blocks=32, skip_tokenizer_init=True)
    out = llm.generate([PROMPT], SamplingParams(temperature=0, max_tokens=6, ignore_eos=True))
    assert len(out[0].outputs[0].token_ids) == 6


# ---- bad settings ------------------------------------------------------------------------
def test_quantize_lm_head_quantizes_the_untied_head_only(tiny_model_dir):
    model = load(tiny_model_dir, quantization="4bit", quantization_group_size=32,
                 quantize_lm_head=True)
    head = model.lm_head
    assert head.weight is None and head.qweight.shape == (64 // 8, 49152)
    assert model.embed_tokens.weight.dtype == torch.float32   # the embedding stays float
    logits = prompt_logits(model, PROMPT)
    torch.testing.assert_close(logits, prompt_logits(dequantize_layers(model), PROMPT),
                               atol=1e-5, rtol=1e-5)
    # without the flag the head stays float, and its logits differ from the 4-bit head's
    plain = load(tiny_model_dir, quantization="4bit", quantization_group_size=32)
    assert plain.lm_head.weight.dtype == torch.float32 and plain.lm_head.quant_method is None
    assert not torch.allclose(logits, prompt_logits(plain, PROMPT))


def test_quantize_lm_head_settings_that_cannot_work_name_the_field(tiny_model_factory):
    with pytest.raises(ConfigError, match=r"'quantize_lm_head': applies to "
                                          r"quantization=4bit only"):
        EngineConfig(quantize_lm_head=True)
    tied = tiny_model_factory("qwen2")
    with pytest.raises(ConfigError, match=r"'quantize_lm_head': .*tie_word_embeddings"):
        load(tied, quantization="4bit", quantization_group_size=32, quantize_lm_head=True)


def test_unknown_method_names_the_field_and_the_choices():
    with pytest.raises(ConfigError, match=r"'quantization': must be one of 4bit, fp8, gptq, awq, "
                                          r"compressed-tensors, gguf; got 'int3'"):
        EngineConfig(quantization="int3")
    with pytest.raises(ConfigError, match="quantization_group_size.*multiple of 8"):
        EngineConfig(quantization="4bit", quantization_group_size=20)


def test_env_variable_sets_the_method(monkeypatch):
    monkeypatch.setenv("KUBELLM_QUANTIZATION", "4bit")
    monkeypatch.setenv("KUBELLM_QUANTIZATION_GROUP_SIZE", "64")
    config = EngineConfig.from_sources()
    assert (config.quantization, config.quantization_group_size) == ("4bit", 64)


def test_format_mismatches_are_startup_errors(tiny_model_dir):
    from tests.runtime.loading.test_quantized_formats import CHECKPOINTS
    with pytest.raises(ConfigError, match=r"'quantization': 'gptq' was asked for, but the "
                                          r"model is a float checkpoint"):
        LLM(tiny_model_dir, quantization="gptq")
    with pytest.raises(ConfigError, match=r"'quantization': 'awq' was asked for, but the "
                                          r"model is a gptq checkpoint; allowed here: unset "
                                          r"or gptq"):
        LLM(str(CHECKPOINTS / "gptq-asym"), quantization="awq")
    with pytest.raises(ConfigError, match="4bit quantizes a float checkpoint at load, but "
                                          "this one is already quantized"):
        LLM(str(CHECKPOINTS / "gguf" / "tiny-Q4_1.gguf"), quantization="4bit")


def test_group_size_that_does_not_divide_a_layer_names_the_field(tiny_model_dir):
    with pytest.raises(ConfigError, match=r"'quantization_group_size'.*in_features=64 is not "
                                          r"a multiple of the quantization group size 48"):
        LLM(tiny_model_dir, quantization="4bit", quantization_group_size=48)


def test_a_tp_size_that_splits_groups_names_the_field(tiny_model_dir):
    """Hidden 64, groups of 64: tensor_parallel_size 4 leaves each rank 16 of the output
    projection's 64 inputs, a quarter of a group."""
    from kubellm.runtime.loading.model_files import load_hf_config
    from kubellm.runtime.loading.quantized.checkpoint import CheckpointSource
    from kubellm.runtime.models.registry import resolve_architecture
    config = load_hf_config(tiny_model_dir)
    cls, args = resolve_architecture(config)
    with ps.building(ps.ParallelState(tp_size=4, tp_rank=0)):
        with torch.device("meta"):
            model = cls(args)
        source = CheckpointSource.open(tiny_model_dir, config, "4bit", 64)
        with pytest.raises(ConfigError, match=r"'tensor_parallel_size': .*o_proj: "
                                              r"tensor_parallel_size=4 gives each rank 16 of "
                                              r"64 input features, which splits the "
                                              r"quantization groups of 64"):
            source.prepare(model)
