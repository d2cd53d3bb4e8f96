"""The embedded SmolLM2-135M-Instruct runs from its Q4_1 weights through the quantized
layers, and that path loses nothing: perplexity on 2,048 tokens of fixed English text
within 0.5% of the same weights dequantized to float32 (measured: equal to 4 decimals;
benchmarks/results/cpu/quantization_quality.json), and it still answers Paris."""
from types import SimpleNamespace

import pytest

from benchmarks.common.model_logits import dequantize_layers, load, perplexity
from benchmarks.cpu.quantization_quality import text_ids
from kubellm.runtime import LLM, SamplingParams


def test_q41_path_perplexity_equals_its_dequantized_weights(default_model_dir):
    ids = text_ids(default_model_dir, 2048)
    assert len(ids) == 2048
    model = load(default_model_dir)
    quantized = [m for m in model.modules() if getattr(m, "quant_method", None) is not None]
    assert len(quantized) == 30 * 4 and {m.quant_method.spec.group_size for m in quantized} == {32}
    ppl_quantized = perplexity(model, ids)
    ppl_float = perplexity(dequantize_layers(model), ids)
    assert abs(ppl_quantized / ppl_float - 1) <= 0.005, (ppl_quantized, ppl_float)
    assert ppl_float < 30   # a trained model on English prose, not noise


def test_engine_runs_the_default_model_quantized_and_answers_paris(default_model_dir):
    llm = LLM(max_model_len=128)
    layer = llm.engine.executor.model.layers["0"].mlp.down_proj
    assert layer.quant_method is not None and layer.weight is None
    out = llm.generate("The capital of France is", SamplingParams(temperature=0,
                                                                  max_tokens=3))[0]
    assert out.outputs[0].text.strip().startswith("Paris"), out.outputs[0].text


@pytest.fixture(scope="module")
def float_model(default_model_dir):
    """The default model's weights in float32, 512 tokens of the text, the model's
    perplexity on them and the largest |key| or |value| it cached; and ``restore()``,
    which puts the float weights back (a test may quantize them)."""
    from benchmarks.common.model_logits import kv_abs_max
    ids = text_ids(default_model_dir, 512)
    model = dequantize_layers(load(default_model_dir))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    ppl = perplexity(model, ids)

    def restore():
        dequantize_layers(model)
        model.load_state_dict(state)
    return SimpleNamespace(model=model, ids=ids, ppl=ppl, kv_abs_max=kv_abs_max(model),
                           restore=restore)


def test_fp8_of_the_float_weights_keeps_the_perplexity(float_model):
    """Online FP8 of the same weights in float32, both forwards (weights alone, as the
    CPU runs it; activations in FP8 too, as CUDA 8.9+ runs it): within 6% of the float
    perplexity on 512 tokens (the whole text, bf16 reference: +2.3% and +3.5%,
    benchmarks/results/cpu/quantization_quality.json)."""
    from benchmarks.common.model_logits import quantize_layers_fp8
    model, ids, ppl_float = float_model.model, float_model.ids, float_model.ppl
    try:
        for activations in (False, True):
            quantize_layers_fp8(model, activations)
            ppl = perplexity(model, ids)
            assert abs(ppl / ppl_float - 1) <= 0.06, (activations, ppl, ppl_float)
            assert ppl != ppl_float, "the FP8 rounding was meant to change the logits"
            float_model.restore()
    finally:
        float_model.restore()


def test_an_fp8_kv_cache_keeps_the_perplexity(float_model):
    """Every key and value of the float32 model read back from an E4M3 cache (scale 1.0):
    within 4% of the float cache's perplexity on 512 tokens (the whole text, bf16:
    +1.9%), and nothing the model caches comes near E4M3's 448 (largest: 22.6)."""
    import torch
    assert float_model.kv_abs_max < 448 / 4
    ppl_fp8 = perplexity(float_model.model, float_model.ids, torch.float8_e4m3fn)
    assert abs(ppl_fp8 / float_model.ppl - 1) <= 0.04, (ppl_fp8, float_model.ppl)
    assert ppl_fp8 != float_model.ppl, "the FP8 cache was meant to round the keys and values"
