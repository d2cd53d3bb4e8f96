"""JSON out, with orjson: every SSE chunk of every stream is encoded here, and orjson does
it several times faster than the json module (benchmarks/serving/transport_bench.py). It
also writes a -inf logprob as null where json writes -Infinity, which is not JSON."""
from __future__ import annotations

import orjson
from starlette.responses import JSONResponse


def dumps(obj) -> bytes:
    return orjson.dumps(obj)


class JSONBytesResponse(JSONResponse):
    def render(self, content) -> bytes:
        return orjson.dumps(content)
