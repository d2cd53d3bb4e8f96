"""What a request's output must match: a JSON schema, any JSON object, a regex, one of
some choices, or a grammar (vLLM's ``StructuredOutputsParams``).

Plain data only, so that it crosses a process boundary with the rest of SamplingParams;
the grammar engine that enforces it lives with the sampler (worker/grammar.py). Checks
here are the ones that need no engine: one kind per request, each of the right type.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from kubellm.runtime.core.parameter_error import ParameterError

KINDS = ("json", "regex", "choice", "grammar", "json_object")
_PARAM = "structured_outputs"


@dataclass(frozen=True)
class StructuredOutputsParams:
    json: str | dict | None = None          # a JSON schema (object or its JSON text)
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None               # EBNF / GBNF, root rule ``root``
    json_object: bool | None = None          # any JSON object
    disable_any_whitespace: bool = False     # compact JSON: no free whitespace
    # which request field this came from, for error messages (response_format,
    # structured_outputs, tool_choice, guided_json ...)
    param: str = _PARAM

    def __post_init__(self):
        given = [k for k in KINDS if getattr(self, k) not in (None, False)]
        if len(given) != 1:
            raise ParameterError(self.param, "give exactly one of json, regex, choice, "
                                             f"grammar, json_object (got {given or 'none'})")
        kind = given[0]
        value = getattr(self, kind)
        if kind == "json":
            schema = value
            if isinstance(value, str):
                try:
                    schema = json.loads(value)
                except json.JSONDecodeError as exc:
                    raise ParameterError(self.param, f"json: not valid JSON: {exc}") from None
            if not isinstance(schema, (dict, bool)):
                raise ParameterError(self.param, "json: a JSON schema must be an object")
        elif kind in ("regex", "grammar"):
            if not isinstance(value, str) or not value:
                raise ParameterError(self.param, f"{kind}: must be a non-empty string")
        elif kind == "choice":
            if not isinstance(value, list) or not value or \
                    not all(isinstance(c, str) and c for c in value):
                raise ParameterError(self.param, "choice: must be a non-empty list of "
                                                 "non-empty strings")
            object.__setattr__(self, "choice", list(value))
        elif value is not True:
            raise ParameterError(self.param, "json_object: must be true")
        if not isinstance(self.disable_any_whitespace, bool):
            raise ParameterError(self.param, "disable_any_whitespace: must be a boolean")

    @property
    def kind(self) -> str:
        return next(k for k in KINDS if getattr(self, k) not in (None, False))

    def schema(self) -> dict | bool:
        """The JSON schema of a ``json`` spec, parsed."""
        return json.loads(self.json) if isinstance(self.json, str) else self.json

    @classmethod
    def from_value(cls, value, param: str = _PARAM) -> "StructuredOutputsParams":
        """From an instance or a dict of its fields (the plain-data form)."""
        if isinstance(value, cls):
            return value
        if not isinstance(value, dict):
            raise ParameterError(param, "must be an object with one of json, regex, choice, "
                                        "grammar, json_object")
        unknown = set(value) - {*KINDS, "disable_any_whitespace", "param"}
        if unknown:
            raise ParameterError(param, f"unknown field(s) {sorted(unknown)}; supported: "
                                        f"{', '.join(KINDS)}, disable_any_whitespace")
        return cls(**{"param": param, **value})
