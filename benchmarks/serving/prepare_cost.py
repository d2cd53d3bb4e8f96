"""What an API server spends per request before it can send it to the engine core: the
µs of ``prepare()`` (parse and bound the JSON, validate, build the sampling parameters,
check the prompt) for the completion bodies ``kubellm bench serve`` sends (token-id
prompts, streamed), and of its parts. Each API server does this for its share of a
burst one body after another (issue 14: 64 requests at once over 4 API servers).

    python -m benchmarks.serving.prepare_cost [--prompt-tokens 512] [--bodies 200]
        [--repeats 5] [--out DIR]

Prints one JSON line: the median over repeats of the mean µs per body.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


class _NoMetrics:
    def __getattr__(self, name):
        return lambda *args, **kwargs: None


def make_state(vocab_size: int, max_model_len: int):
    from kubellm.runtime.server.config import ServerConfig
    from kubellm.runtime.server.state import ServerState
    # token-id prompts never reach the tokenizer
    return ServerState(engine_client=None, tokenizer=None, model_name="m",
                       max_model_len=max_model_len, vocab_size=vocab_size,
                       max_chars_per_token=64, config=ServerConfig(), metrics=_NoMetrics(),
                       preprocess_pool=ThreadPoolExecutor(1))


def bodies(num: int, prompt_tokens: int, vocab_size: int) -> list[bytes]:
    from kubellm.runtime.cli.bench.http_client import completion_body
    rng = random.Random(0)
    return [json.dumps(completion_body([rng.randrange(16, vocab_size)
                                        for _ in range(prompt_tokens)], 128, "m"),
                       separators=(",", ":")).encode() for _ in range(num)]


def mean_us(fn, items, repeats: int) -> float:
    """The median over ``repeats`` of the mean µs of ``fn(item)``."""
    for item in items[:10]:
        fn(item)   # warm
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        for item in items:
            fn(item)
        runs.append((time.perf_counter() - start) / len(items) * 1e6)
    return round(statistics.median(runs), 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--bodies", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--vocab-size", type=int, default=49152)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    from kubellm.runtime.server import json_body
    from kubellm.runtime.server.generation import prepare
    from kubellm.runtime.server.prompts import completion_prompts
    from kubellm.runtime.server.protocol import parse_body
    from kubellm.runtime.server.protocol_completions import CompletionRequest
    state = make_state(args.vocab_size, max_model_len=args.prompt_tokens + 1024)
    raw = bodies(args.bodies, args.prompt_tokens, args.vocab_size)
    parsed = [parse_body(b, CompletionRequest) for b in raw]
    row = {
        "prompt_tokens": args.prompt_tokens, "body_bytes": len(raw[0]),
        "prepare_us": mean_us(lambda b: prepare(state, b, CompletionRequest), raw,
                              args.repeats),
        "parse_json_us": mean_us(json_body.parse_json_object, raw, args.repeats),
        "digit_scan_us": mean_us(json_body._has_long_digit_run, raw, args.repeats),
        "validate_us": mean_us(lambda b: parse_body(b, CompletionRequest), raw, args.repeats),
        "prompt_check_us": mean_us(
            lambda body: completion_prompts(state, body.prompts(), None), parsed,
            args.repeats),
    }
    print(json.dumps(row), flush=True)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "prepare_cost.json").write_text(json.dumps(row, indent=1) + "\n")


if __name__ == "__main__":
    main()
