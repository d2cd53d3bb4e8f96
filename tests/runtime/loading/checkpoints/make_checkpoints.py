"""Tiny quantized test checkpoints, written by the real tools, and transformers' logits on
them (the reference the tests compare against). Run once; the outputs are committed.

Each tool pins its own transformers / compressed-tensors / numpy, so each runs in its own
virtual environment (versions in README.md beside this file):

    python make_checkpoints.py source      # any env with transformers + tokenizers
    <venv-gptq>/bin/python make_checkpoints.py gptq     # GPTQModel: GPTQ desc_act, GPTQ asym
    <venv-awq>/bin/python make_checkpoints.py awq       # AutoAWQ: AWQ GEMM
    <venv-llmc>/bin/python make_checkpoints.py ct       # llm-compressor: compressed-tensors
    <venv with gguf>/bin/python make_checkpoints.py gguf   # gguf's writer: Q4_0 Q4_1 Q8_0 Q4_K

The source model: a random Llama (1 layer, hidden 256, intermediate 256 so that GGUF's
256-value Q4_K blocks fit, 4 heads, 2 KV heads, tied embeddings, init 0.2 so that greedy
decoding has no near-ties), fp16, with a byte-level BPE tokenizer of 300 tokens trained
here on the calibration text (the model's vocabulary is 320).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("GPTQMODEL_CPU_WORKERS", "2")   # GPTQModel's pools on 2 cores
HERE = Path(__file__).resolve().parent
SOURCE = HERE / "source"
PROMPT = [1, 45, 120, 77, 250, 9, 33, 180, 61, 5, 140, 99]   # fixed token ids
TEXTS = [
    "The quick brown fox jumps over the lazy dog. " * 4,
    "Paris is the capital of France, and Berlin is the capital of Germany.",
    "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n",
    "Large language models are trained on large amounts of text from the internet.",
    "In 1969, Neil Armstrong became the first person to walk on the Moon.",
    "Water boils at 100 degrees Celsius at sea level under standard pressure.",
    "Kubernetes schedules containers onto nodes and restarts them when they fail.",
    "Quantization reduces the number of bits used to store each weight of a model.",
] * 4


def make_source():
    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(TEXTS, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|endoftext|>",
        pad_token="<|endoftext|>")
    config = transformers.LlamaConfig(
        vocab_size=320, hidden_size=256, intermediate_size=256, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        rms_norm_eps=1e-5, initializer_range=0.2, tie_word_embeddings=True,
        bos_token_id=1, eos_token_id=0)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to(torch.float16)
    model.save_pretrained(SOURCE)
    fast.save_pretrained(SOURCE)


def write_reference(out: Path, model, note: str):
    """transformers' fp32 logits for PROMPT and its greedy continuation."""
    import torch
    from safetensors.torch import save_file
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        logits = model(ids).logits[0].float()
        greedy = model.generate(ids, max_new_tokens=16, do_sample=False, min_new_tokens=16,
                                pad_token_id=0)[0, len(PROMPT):]
    (out / "transformers-reference").mkdir(exist_ok=True)   # not a weight file of the model
    save_file({"input_ids": ids[0], "logits": logits.contiguous(), "greedy": greedy.contiguous()},
              str(out / "transformers-reference" / "logits.safetensors"), metadata={"how": note})


def quantize_gptq():
    import torch
    import transformers
    from gptqmodel import BACKEND, GPTQModel
    from gptqmodel.quantization.config import GPTQConfig
    for name, sym, desc_act in (("gptq-descact", True, True), ("gptq-asym", False, False)):
        out = HERE / name
        cfg = GPTQConfig(bits=4, group_size=64, desc_act=desc_act, act_group_aware=False,
                         sym=sym, format="gptq")
        model = GPTQModel.load(str(SOURCE), quantize_config=cfg, device="cpu",
                               dtype=torch.float16)
        model.quantize(TEXTS, batch_size=1, backend=BACKEND.AUTO)
        model.save(str(out))
        (out / "quant_log.csv").unlink(missing_ok=True)
        ref = transformers.AutoModelForCausalLM.from_pretrained(
            out, device_map="cpu", dtype=torch.float32,
            quantization_config=transformers.GPTQConfig(bits=4, backend="torch"))
        write_reference(out, ref, "transformers GPTQ backend=torch (TorchLinear), float32")


def quantize_awq():
    import torch
    import transformers
    from awq import AutoAWQForCausalLM
    out = HERE / "awq-gemm"
    model = AutoAWQForCausalLM.from_pretrained(str(SOURCE), torch_dtype=torch.float16,
                                               device_map="cpu")
    tok = transformers.AutoTokenizer.from_pretrained(SOURCE)
    model.quantize(tok, quant_config={"zero_point": True, "q_group_size": 64, "w_bit": 4,
                                      "version": "GEMM"},
                   calib_data=TEXTS, max_calib_samples=len(TEXTS), max_calib_seq_len=64,
                   n_parallel_calib_samples=None)
    model.save_quantized(str(out))
    tok.save_pretrained(str(out))


def reference_awq():   # in the GPTQModel env: transformers loads AWQ through gptqmodel
    import torch
    import transformers
    out = HERE / "awq-gemm"
    ref = transformers.AutoModelForCausalLM.from_pretrained(
        out, device_map="cpu", dtype=torch.float32,
        quantization_config=transformers.AwqConfig(bits=4, backend="torch_awq"))
    write_reference(out, ref, "transformers AWQ backend=torch_awq (AwqTorchLinear), float32")


def quantize_ct():
    import torch
    import transformers
    from datasets import Dataset
    from llmcompressor import oneshot
    from llmcompressor.modifiers.gptq import GPTQModifier
    from llmcompressor.modifiers.quantization import QuantizationModifier
    recipes = {"ct-w4a16": GPTQModifier(targets="Linear", scheme="W4A16", ignore=["lm_head"]),
               "ct-w4a16-asym": QuantizationModifier(targets="Linear", scheme="W4A16_ASYM",
                                                     ignore=["lm_head"])}
    for name, recipe in recipes.items():
        out = HERE / name
        model = transformers.AutoModelForCausalLM.from_pretrained(SOURCE, dtype=torch.float16)
        tok = transformers.AutoTokenizer.from_pretrained(SOURCE)
        oneshot(model=model, tokenizer=tok, dataset=Dataset.from_dict({"text": TEXTS}),
                recipe=recipe, num_calibration_samples=len(TEXTS), max_seq_length=64,
                shuffle_calibration_samples=False)
        model.save_pretrained(out, save_compressed=True)
        tok.save_pretrained(out)
        (out / "recipe.yaml").unlink(missing_ok=True)
        ref = transformers.AutoModelForCausalLM.from_pretrained(
            out, dtype=torch.float32,
            quantization_config=transformers.CompressedTensorsConfig(run_compressed=False))
        write_reference(out, ref, "transformers compressed-tensors decompressed, float32")


def write_gguf():
    sys.path.insert(0, str(HERE))
    from gguf_writer import write_gguf_files
    write_gguf_files(SOURCE, HERE / "gguf", ["Q4_0", "Q4_1", "Q8_0", "Q4_K"])


if __name__ == "__main__":
    step = sys.argv[1]
    if step == "ct":   # llm-compressor on CPU: its activation cache pins memory
        import torch
        if not torch.cuda.is_available():
            from llmcompressor.pipelines.cache import IntermediatesCache
            IntermediatesCache.pin_memory = lambda self, *a, **k: None
    {"source": make_source, "gptq": quantize_gptq, "awq": quantize_awq,
     "awq-reference": reference_awq, "ct": quantize_ct, "gguf": write_gguf}[step]()
    print(json.dumps(sorted(str(p.relative_to(HERE)) for p in HERE.rglob("*") if p.is_file())))
