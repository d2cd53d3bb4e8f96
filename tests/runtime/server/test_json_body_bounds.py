"""The 64-bit integer bound of request bodies (json_body.py) at its edges: the walk that
enforces it runs only where the bytes hold a run of 19 digits, so the scan that decides
it must see every such run, inside strings too (a false alarm only costs the walk)."""
import pytest

from kubellm.runtime.server.errors import APIError
from kubellm.runtime.server.json_body import _has_long_digit_run, parse_json_object


@pytest.mark.parametrize("raw,expected", [
    (b'{"a": 123456789012345678}', False),           # 18 digits
    (b'{"a": 1234567890123456789}', True),           # 19
    (b'{"a": [123456789, 1234567890]}', False),      # 19 digits, not in one run
    (b'{"a": "x9223372036854775808"}', True),        # in a string: scanned all the same
    (b'{"prompt": [' + b",".join([b"49151"] * 600) + b"]}", False),
])
def test_the_scan_finds_every_run_of_19_digits(raw, expected):
    assert _has_long_digit_run(raw) is expected


def test_an_integer_just_past_64_bits_in_an_ignored_field_is_a_400():
    assert parse_json_object(b'{"x": 9223372036854775807}') == {"x": 2**63 - 1}
    assert parse_json_object(b'{"x": -9223372036854775808}') == {"x": -(2**63)}
    for raw in (b'{"x": 9223372036854775808}', b'{"x": [1, {"y": -9223372036854775809}]}'):
        with pytest.raises(APIError, match="outside the 64-bit range"):
            parse_json_object(raw)
