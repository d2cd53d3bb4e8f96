"""The bytes between front ends and the engine core: msgpack (msgspec), with pickle as
the fallback for any value msgpack cannot hold, so that a field someone adds to
SamplingParams or RequestOutput travels without a change here.

Measured (benchmarks/serving/transport_bench.py, results in
benchmarks/results/serving-cpu/transport.md): for one step's outputs of 256 requests,
msgspec msgpack encodes and decodes several times faster than pickle and than json, and
ZeroMQ ipc moves the bytes faster than a multiprocessing Pipe.
"""
from __future__ import annotations

import pickle

import msgspec

# message kinds, front end -> core
ADD, ABORT, FINISH_SEQUENCE, HELLO, PREPARING = 0, 1, 2, 3, 4
# core -> front end
OUTPUTS = 10

_PICKLE_EXT = 1


def pickled(obj) -> msgspec.msgpack.Ext:
    """``obj`` whole, whatever its fields: msgspec would send a dataclass as a plain map
    and the other side would get a dict back."""
    return msgspec.msgpack.Ext(_PICKLE_EXT, pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def _enc_hook(obj):
    """Anything msgpack has no type for (a SamplingParams, a dataclass a later field
    holds, a PrefixView) travels pickled inside a msgpack extension."""
    return msgspec.msgpack.Ext(_PICKLE_EXT, pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def _ext_hook(code: int, data: memoryview):
    if code == _PICKLE_EXT:
        return pickle.loads(data)
    raise ValueError(f"unknown msgpack extension {code}")


class Codec:
    """One per socket owner (msgspec encoders keep a reusable buffer; not thread-safe)."""

    def __init__(self):
        self._encoder = msgspec.msgpack.Encoder(enc_hook=_enc_hook)
        self._decoder = msgspec.msgpack.Decoder(ext_hook=_ext_hook)

    def encode(self, message) -> bytes:
        return self._encoder.encode(message)

    def decode(self, data):
        return self._decoder.decode(data)


def ipc_address(directory: str, name: str) -> str:
    return f"ipc://{directory}/{name}"


def input_address(directory: str) -> str:
    """Where the core listens for every front end's requests."""
    return ipc_address(directory, "core-input")


def output_address(directory: str, frontend_index: int) -> str:
    """Where front end ``frontend_index`` listens for its requests' outputs."""
    return ipc_address(directory, f"frontend-{frontend_index}-output")
