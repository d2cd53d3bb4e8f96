"""Request bodies as JSON, with the bounds a public endpoint needs: every malformed body is
a 400 naming what is wrong, never a 500.

pydantic-core's parser (jiter, already a dependency through pydantic) rejects what
Python's json module lets through and later code trips over: lone surrogates
("\\ud800": a str no tokenizer or JSON encoder can write back), invalid UTF-8, NaN and
Infinity. On top of it, two bounds that hold anywhere in the body, ignored fields too:
nesting deeper than MAX_JSON_DEPTH (Python's json recursed until RecursionError) and
integers outside 64 bits (Python's json raised ValueError past 4,300 digits; a huge id
would overflow a tensor later). Measured on a 4 MB body: 0.5 ms for strings, 45 ms for a
million-number list (json: 8.6 / 82 ms).
"""
from __future__ import annotations

import pydantic_core

from kubellm.runtime.server.errors import bad_request

MAX_JSON_DEPTH = 64
INT_MIN, INT_MAX = -(2**63), 2**63 - 1
# No run of 19 digits: every integer fits 64 bits. Found by mapping digits to b"1" and
# everything else to b"0" (bytes.translate), then a substring search: 3.5 µs for a
# 512-token prompt's 3 KB body, where re.search(rb"\d{19}") took 32-62 µs, about 40% of
# the whole prepare() of such a request on the 2-core CPU
# (benchmarks/results/serving-cpu/prepare_cost.md).
_DIGITS_AS_ONES = bytes(0x31 if 0x30 <= b <= 0x39 else 0x30 for b in range(256))
_LONG_DIGIT_RUN = b"1" * 19


def _has_long_digit_run(raw: bytes) -> bool:
    return _LONG_DIGIT_RUN in raw.translate(_DIGITS_AS_ONES)


def parse_json_object(raw: bytes) -> dict:
    try:
        data = pydantic_core.from_json(raw, allow_inf_nan=False)
    except ValueError as exc:
        text = str(exc)
        if "recursion limit" in text:
            raise bad_request(f"request body nests JSON deeper than {MAX_JSON_DEPTH} "
                              "levels") from None
        if "number out of range" in text:
            raise bad_request("request body holds an integer outside the 64-bit range")\
                from None
        raise bad_request(f"request body is not valid JSON: {text}") from None
    if not isinstance(data, dict):
        raise bad_request("request body must be a JSON object")
    # the walk below costs O(values); skip it when the bytes alone prove it unneeded
    if raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH or _has_long_digit_run(raw):
        _check_bounds(data)
    return data


def _check_bounds(data: dict) -> None:
    stack = [(data, 1, ())]
    while stack:
        value, depth, path = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise bad_request(f"{_name(path) or 'request body'} nests JSON deeper than "
                              f"{MAX_JSON_DEPTH} levels", param=_param(path))
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if type(item) is int and not INT_MIN <= item <= INT_MAX:
                raise bad_request(f"{_name(path + (key,))} is an integer outside the 64-bit "
                                  "range", param=_param(path + (key,)))
            if isinstance(item, (dict, list)):
                stack.append((item, depth + 1, path + (key,)))


def _name(path: tuple) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _param(path: tuple) -> str | None:
    return _name(path) or None
