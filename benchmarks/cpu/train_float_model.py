"""Train a small Llama from scratch on this machine's CPU and save it as a bf16 Hugging
Face checkpoint: a float model whose weights never went through 4-bit, for measuring what
online 4-bit costs (benchmarks/cpu/quantization_quality.py --float-model DIR). The only
trained model on this machine otherwise is SmolLM2-135M from a Q4_1 GGUF, whose weights
already lie on a 4-bit grid.

Corpus: the Python standard library's own source (``*.py`` of the running interpreter,
tests left out), sorted, so every machine with the same Python trains on the same text.
Tokenizer: a byte-level BPE of 4,096 tokens trained on that corpus with the ``tokenizers``
library (a 49k vocabulary would spend most of a CPU's time in the LM head). Model:
transformers' LlamaForCausalLM (hidden 256, 4 layers, 4 query heads over 2 KV heads,
intermediate 768: every linear's input a multiple of 128, so groups of 128 fit), AdamW,
a fixed seed, for a fixed number of steps. Held out: every 20th file of the corpus.

    python -m benchmarks.cpu.train_float_model --out /tmp/float-llama [--steps 1500]

It prints the training loss and the held-out perplexity; about 15 minutes on this
repository's 2-core machine at the default steps.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sys
import sysconfig
import time
from pathlib import Path

import torch

from benchmarks.common.model_logits import windowed_perplexity

HELD_OUT_EVERY = 20
VOCAB = 4096
SHAPE = dict(hidden_size=256, intermediate_size=768, num_hidden_layers=4,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
             rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True)


def corpus_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = {"test", "tests", "idlelib", "site-packages", "__pycache__", "lib2to3"}
    return sorted(p for p in root.rglob("*.py")
                  if not skip & set(p.relative_to(root).parts))


def split_corpus(files: int | None = None) -> tuple[str, str]:
    """(training text, held-out text): every HELD_OUT_EVERY-th file held out; ``files``:
    the first that many files alone (the script's smoke test)."""
    train, held = [], []
    for i, path in enumerate(corpus_files()[:files]):
        text = path.read_text(encoding="utf-8", errors="replace")
        (held if i % HELD_OUT_EVERY == 0 else train).append(text)
    return "\n".join(train), "\n".join(held)


def train_tokenizer(text: str, out: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator(text.split("\n\n"), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|endoftext|>",
                                   bos_token="<|endoftext|>")
    fast.save_pretrained(out)
    return fast


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--files", type=int, default=None,
                    help="the corpus's first N files alone (a smoke run)")
    args = ap.parse_args()
    from transformers import LlamaConfig, LlamaForCausalLM
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    started = time.time()
    train_text, held_text = split_corpus(args.files)
    tokenizer = train_tokenizer(train_text, out)
    train_ids = torch.tensor(tokenizer(train_text).input_ids, dtype=torch.long)
    held_ids = torch.tensor(tokenizer(held_text).input_ids, dtype=torch.long)
    print(f"corpus: {len(train_ids):,} training tokens, {len(held_ids):,} held out "
          f"({time.time() - started:.0f} s to tokenize)", flush=True)
    config = LlamaConfig(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, **SHAPE)
    model = LlamaForCausalLM(config)
    optim = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95),
                              weight_decay=0.1)
    warmup = max(1, args.steps // 30)
    schedule = torch.optim.lr_scheduler.LambdaLR(optim, lambda s: min(
        (s + 1) / warmup, 0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, s / args.steps)))))
    log = []
    for step in range(args.steps):
        starts = [rng.randrange(len(train_ids) - args.seq - 1) for _ in range(args.batch)]
        batch = torch.stack([train_ids[s:s + args.seq] for s in starts])
        loss = model(batch, labels=batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        optim.zero_grad(set_to_none=True)
        schedule.step()
        if step % 100 == 0 or step == args.steps - 1:
            log.append({"step": step, "loss": round(loss.item(), 4),
                        "seconds": round(time.time() - started)})
            print(json.dumps(log[-1]), flush=True)
    model.eval()     # the first 64 held-out windows, each from its own start
    ppl = windowed_perplexity(model, held_ids[:64 * args.seq].tolist(), args.seq, hf=True)
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    summary = {"files": args.files, "steps": args.steps, "batch": args.batch, "seq": args.seq,
               "training_tokens_seen": args.steps * args.batch * args.seq,
               "corpus_tokens": len(train_ids), "held_out_perplexity_fp32": round(ppl, 4),
               "parameters": sum(p.numel() for p in model.parameters()),
               "seconds": round(time.time() - started), "python": sys.version.split()[0],
               "torch": torch.__version__, "log": log}
    (out / "training.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps({k: v for k, v in summary.items() if k != "log"}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
