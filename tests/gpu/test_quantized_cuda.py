"""4-bit weights on a CUDA GPU (run by STAGES=w4a16 / tests on the H200): the engine with
quantization="4bit" (Triton W4A16 GEMM, CUDA graphs and eager) against transformers in bf16
holding the dequantized weights of the very same 4-bit layers, by the top-5 rule."""
from __future__ import annotations

import random

import pytest
import torch

from benchmarks.common.agreement import first_disagreement
from benchmarks.common.shapes import LLAMA3_8B, write_config

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip(reason="needs a CUDA GPU", allow_module_level=True)

MAX_TOKENS = 16


def _checkpoint(tmp_path, layers=4):
    from transformers import AutoConfig, AutoModelForCausalLM
    path = write_config(LLAMA3_8B, tmp_path / "cfg", num_hidden_layers=layers,
                        initializer_range=0.05)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path),
                                                 dtype=torch.bfloat16)
    model.save_pretrained(tmp_path / "ckpt")
    return str(tmp_path / "ckpt"), model.eval()


def _dequantized_state(ours) -> dict[str, torch.Tensor]:
    """Hugging Face weight names -> our 4-bit layers' weights, dequantized."""
    from kubellm.kernels.quant_layout import dequantize
    args = ours.args
    q, kv = args.num_heads * args.head_dim, args.num_kv_heads * args.head_dim
    state = {}

    def weight(m):
        spec = m.quant_method.spec
        return dequantize(m.qweight, m.scales, m.biases, spec.group_size, spec.bits,
                          m.g_idx).t()
    for i, layer in ours.layers.items():
        attn, mlp = layer.self_attn, layer.mlp
        wq, wk, wv = weight(attn.qkv_proj).split([q, kv, kv])
        gate, up = weight(mlp.gate_up_proj).chunk(2)
        for name, w in (("self_attn.q_proj", wq), ("self_attn.k_proj", wk),
                        ("self_attn.v_proj", wv), ("self_attn.o_proj", weight(attn.o_proj)),
                        ("mlp.gate_proj", gate), ("mlp.up_proj", up),
                        ("mlp.down_proj", weight(mlp.down_proj))):
            state[f"model.layers.{i}.{name}.weight"] = w.to(torch.bfloat16)
    if ours.lm_head is not None and ours.lm_head.quant_method is not None:   # quantize_lm_head
        state["lm_head.weight"] = weight(ours.lm_head)[:args.vocab_size].to(torch.bfloat16)
    return state


@pytest.mark.parametrize("enforce_eager, quantize_lm_head",
                         [(False, False), (True, False), (False, True)],
                         ids=["graphs", "eager", "graphs-4bit-head"])
def test_4bit_top5_agreement_with_transformers_on_the_same_weights(enforce_eager,
                                                                   quantize_lm_head, tmp_path):
    from kubellm.runtime import LLM, SamplingParams
    path, hf = _checkpoint(tmp_path)
    llm = LLM(path, skip_tokenizer_init=True, max_model_len=2048, max_num_seqs=16,
              enforce_eager=enforce_eager, gpu_memory_utilization=0.5, quantization="4bit",
              quantize_lm_head=quantize_lm_head)
    hf.load_state_dict(_dequantized_state(llm.engine.executor.model), strict=False)
    rng = random.Random(0)
    prompts = [[rng.randrange(1000, 100000) for _ in range(rng.randint(5, 300))]
               for _ in range(12)]
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=MAX_TOKENS,
                                                ignore_eos=True, logprobs=5))
    failures = []
    for p, o in zip(prompts, outs):
        gen = hf.generate(torch.tensor([p], device="cuda"), do_sample=False,
                          max_new_tokens=MAX_TOKENS, min_new_tokens=MAX_TOKENS,
                          output_scores=True, return_dict_in_generate=True, pad_token_id=0)
        ref = gen.sequences[0, len(p):].tolist()
        ref_top5 = [set(torch.topk(s[0].float(), 5).indices.tolist()) for s in gen.scores]
        msg = first_disagreement(o.outputs[0].token_ids, o.outputs[0].logprobs, ref, ref_top5,
                                 names=("ours 4-bit", "transformers dequantized"))
        if msg:
            failures.append(msg)
    assert not failures, failures
