"""What the engine core <-> front end hop costs, measured side by side in one run
(the choices in engine_core/wire.py and server/fast_json.py):

- encoding + decoding one engine step's outputs for 256 running requests: msgspec
  msgpack (what we use), pickle, orjson, json;
- moving such messages between two processes: ZeroMQ ipc PUSH/PULL against a
  multiprocessing Pipe;
- one SSE chunk to JSON bytes: orjson against json;
- an HTTP server's event loop and parser: uvicorn with uvloop + httptools against
  asyncio + h11, requests/s of a small JSON endpoint over keep-alive connections.

    python -m benchmarks.serving.transport_bench [--out DIR]

Ratios, not absolute times, are the claim: a shared CPU machine is noisy.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import pickle
import time

import msgspec
import orjson

BATCH, STEPS = 256, 200


def step_message(step: int) -> list:
    """One step of 256 decoding requests as the core sends it (see output_delta.py)."""
    deltas = [[f"cmpl-{i:032x}", None, [[0, {"token_ids": [1000 + step + i]}, None]]]
              for i in range(BATCH)]
    stats = {"num_waiting": 12, "num_running": BATCH, "kv_cache_usage": 0.4,
             "num_free_blocks": 1000, "num_total_blocks": 4000, "num_preemptions_total": 0,
             "prompt_tokens_total": 123456, "generation_tokens_total": 654321,
             "prefix_cache_queries_total": 1, "prefix_cache_hits_total": 0}
    return [10, deltas, [], [], stats]


def time_it(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(repeat):
            fn()
        best = min(best, (time.perf_counter() - t0) / repeat)
    return best


def codecs() -> dict:
    msg = step_message(0)
    enc, dec = msgspec.msgpack.Encoder(), msgspec.msgpack.Decoder()
    out = {}
    for name, dump, load in (
            ("msgspec msgpack", enc.encode, dec.decode),
            ("pickle", lambda m: pickle.dumps(m, protocol=5), pickle.loads),
            ("orjson", orjson.dumps, orjson.loads),
            ("json", lambda m: json.dumps(m).encode(), json.loads)):
        data = dump(msg)
        out[name] = {"bytes": len(data),
                     "encode_us": round(1e6 * time_it(lambda: dump(msg), 200), 1),
                     "decode_us": round(1e6 * time_it(lambda: load(data), 200), 1)}
    return out


def _zmq_receiver(address: str, count: int) -> None:
    import zmq
    sock = zmq.Context().socket(zmq.PULL)
    sock.bind(address)
    dec = msgspec.msgpack.Decoder()
    for _ in range(count):
        dec.decode(sock.recv())


def _pipe_receiver(conn, count: int) -> None:
    for _ in range(count):
        conn.recv()  # pickled by multiprocessing


def transports(tmp: str) -> dict:
    import zmq
    messages = [step_message(s) for s in range(STEPS)]
    enc = msgspec.msgpack.Encoder()
    ctx = mp.get_context("spawn")
    address = f"ipc://{tmp}/bench"
    proc = ctx.Process(target=_zmq_receiver, args=(address, STEPS))
    proc.start()
    sock = zmq.Context().socket(zmq.PUSH)
    sock.connect(address)
    time.sleep(1.0)  # let the receiver start (outside the timed part)
    t0 = time.perf_counter()
    for m in messages:
        sock.send(enc.encode(m), copy=False)
    proc.join()
    zmq_s = time.perf_counter() - t0
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_pipe_receiver, args=(child, STEPS))
    proc.start()
    time.sleep(1.0)
    t0 = time.perf_counter()
    for m in messages:
        parent.send(m)
    proc.join()
    pipe_s = time.perf_counter() - t0
    return {"zmq ipc + msgspec": {"ms_per_step": round(1e3 * zmq_s / STEPS, 3)},
            "multiprocessing Pipe (pickle)": {"ms_per_step": round(1e3 * pipe_s / STEPS, 3)}}


def sse_chunk() -> dict:
    chunk = {"id": "cmpl-" + "0" * 32, "object": "text_completion", "created": 1796000000,
             "model": "meta-llama/Llama-3-8B", "choices": [
                 {"index": 0, "text": " the", "finish_reason": None, "logprobs": None}]}
    return {"orjson_us": round(1e6 * time_it(lambda: orjson.dumps(chunk), 20000), 2),
            "json_us": round(1e6 * time_it(
                lambda: json.dumps(chunk, separators=(",", ":")).encode(), 20000), 2)}


def _serve(port: int, loop: str, http: str) -> None:
    import uvicorn
    from fastapi import FastAPI
    app = FastAPI()

    @app.get("/ping")
    async def ping():
        return {"ok": True}
    uvicorn.run(app, host="127.0.0.1", port=port, loop=loop, http=http, log_level="error")


def http_stacks(seconds: float = 3.0) -> dict:
    import asyncio
    import socket

    import httpx
    out = {}
    for loop, http in (("uvloop", "httptools"), ("asyncio", "h11")):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        proc = mp.get_context("spawn").Process(target=_serve, args=(port, loop, http))
        proc.start()
        url = f"http://127.0.0.1:{port}/ping"
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "server did not start"
                time.sleep(0.2)

        async def hammer():
            count = 0
            async with httpx.AsyncClient() as client:
                end = time.perf_counter() + seconds

                async def worker():
                    nonlocal count
                    while time.perf_counter() < end:
                        await client.get(url)
                        count += 1
                await asyncio.gather(*(worker() for _ in range(8)))
            return count / seconds
        out[f"{loop} + {http}"] = {"requests_per_s": round(asyncio.run(hammer()))}
        proc.terminate()
        proc.join()
    return out


def main() -> None:
    import tempfile
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=None)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        result = {"step_message_codecs": codecs(), "transport_200_steps": transports(tmp),
                  "sse_chunk": sse_chunk(), "http_stacks": http_stacks()}
    print(json.dumps(result, indent=2))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "transport.json"), "w") as fh:
            json.dump(result, fh, indent=2)


if __name__ == "__main__":
    main()
