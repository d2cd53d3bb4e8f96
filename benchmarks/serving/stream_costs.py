"""Host CPU per streamed token on each side of the engine core's socket, before and after
the cuts of issue 14's 512-stream load, in one process (thread CPU time, medians):

- core: ``DeltaEncoder.encode`` for one step of 512 plain decoding requests, the general
  path against the decode-step short path;
- API server: ``EngineCoreClient._dispatch`` of one core message (128 streams, a token
  each: delta applied, detokenized, snapshot, metrics hook, handed to the stream), with
  the detokenizer through ``tokenizer.decode`` or the Rust decode, and the snapshot
  through ``dataclasses.replace`` or the attrgetter copy.

``python -m benchmarks.serving.stream_costs [--rounds 5]``."""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import random
import statistics
import time
import types

from kubellm.runtime.core.outputs import CompletionOutput, PrefixView, RequestOutput
from kubellm.runtime.engine_core import output_delta


def encode_ms_per_step(num_requests: int = 512, num_steps: int = 64) -> float:
    encoder = output_delta.DeltaEncoder()
    ids = {f"r{i}": [] for i in range(num_requests)}
    total = 0.0
    for step in range(num_steps):
        outs = []
        for request_id, tokens in ids.items():
            tokens.append(1000 + step)
            outs.append(RequestOutput(request_id, None, [1, 2], [CompletionOutput(
                0, token_ids=PrefixView(tokens, len(tokens)))], num_cached_tokens=0,
                metrics={"arrival_time": 1.0, "first_scheduled_time": 1.1,
                         "first_token_time": 1.2, "finished_time": None,
                         "num_preemptions": 0}))
        start = time.thread_time()
        for out in outs:
            encoder.encode(out)
        total += time.thread_time() - start
    return 1e3 * total / num_steps


async def dispatch_us_per_token(tokenizer, num_streams: int = 128, num_steps: int = 64):
    from kubellm.runtime.core.sampling_params import SamplingParams
    from kubellm.runtime.engine_core.assembler import RequestAssembler
    from kubellm.runtime.engine_core.client import EngineCoreClient
    from kubellm.runtime.engine_core.streams import RequestStream
    client = EngineCoreClient(types.SimpleNamespace(pid=0), "/nonexistent", 0, tokenizer)
    params = SamplingParams(max_tokens=num_steps, ignore_eos=True, temperature=0.0)
    rng = random.Random(0)
    for i in range(num_streams):
        client._requests[f"r{i}"] = (RequestStream(client, f"r{i}"),
                                     RequestAssembler(f"r{i}", None, [5, 6], params, tokenizer))
    total = 0.0
    for _ in range(num_steps):
        deltas = [[f"r{i}", None, [[0, {"token_ids": [rng.randrange(100, 40000)]}, None]]]
                  for i in range(num_streams)]
        start = time.thread_time()
        client._dispatch([0, deltas, [], [], {}])
        total += time.thread_time() - start
        for stream, _ in client._requests.values():
            stream.queue.get_nowait()
    return 1e6 * total / num_steps / num_streams


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    from transformers import AutoTokenizer

    from kubellm.runtime.core import detokenizer
    from kubellm.runtime.engine_core import assembler
    from kubellm.runtime.loading.default_model import default_model_path
    tokenizer = AutoTokenizer.from_pretrained(default_model_path())

    encode = {False: [], True: []}
    for _ in range(args.rounds):
        for short in (False, True):
            output_delta._SHORT_PATH = short
            encode[short].append(encode_ms_per_step())
    print(f"core: delta encode ms per step of 512, general {statistics.median(encode[False]):.3f}"
          f", short path {statistics.median(encode[True]):.3f} (medians of {args.rounds})")

    def replace(obj, **changes):
        return dataclasses.replace(obj, **changes)
    own = (detokenizer.raw_decoder, assembler._copy_request, assembler._copy_completion)
    variants = {"before": (lambda _: None, replace, replace),
                "raw decode": (own[0], replace, replace),
                "copy": (lambda _: None, own[1], own[2]), "both": own}
    dispatch = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, (raw, copy_request, copy_completion) in variants.items():
            detokenizer.raw_decoder = raw
            assembler._copy_request, assembler._copy_completion = copy_request, copy_completion
            dispatch[name].append(asyncio.run(dispatch_us_per_token(tokenizer)))
    for name, values in dispatch.items():
        print(f"API server: dispatch us per token, {name}: {statistics.median(values):.1f}")


if __name__ == "__main__":
    main()
