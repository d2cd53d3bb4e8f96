"""The request fields that constrain the output's form, to one StructuredOutputsParams:
OpenAI's ``response_format`` (``json_object``, ``json_schema``), vLLM's
``structured_outputs`` and its older ``guided_json`` / ``guided_regex`` /
``guided_choice`` / ``guided_grammar``. At most one of them per request; the grammar
engine compiles it on the engine's side (a bad schema or regex is a 400 from there)."""
from __future__ import annotations

from kubellm.runtime.core.structured_outputs import StructuredOutputsParams
from kubellm.runtime.server.errors import bad_request

_GUIDED = {"guided_json": "json", "guided_regex": "regex", "guided_choice": "choice",
           "guided_grammar": "grammar"}


def structured_outputs(body) -> StructuredOutputsParams | None:
    """From a parsed request body; raises ParameterError / APIError naming the field."""
    given = []
    if body.response_format is not None:
        spec = _response_format(body.response_format)
        if spec is not None:
            given.append(("response_format", spec))
    if body.structured_outputs is not None:
        given.append(("structured_outputs", StructuredOutputsParams.from_value(
            body.structured_outputs, "structured_outputs")))
    for name, kind in _GUIDED.items():
        value = getattr(body, name)
        if value is not None:
            given.append((name, StructuredOutputsParams(**{kind: value, "param": name})))
    if body.guided_whitespace_pattern is not None:
        raise bad_request("guided_whitespace_pattern is not supported; use "
                          "structured_outputs.disable_any_whitespace",
                          param="guided_whitespace_pattern")
    if len(given) > 1:
        raise bad_request(f"give one of {', '.join(n for n, _ in given)}, not several",
                          param=given[1][0])
    return given[0][1] if given else None


def _response_format(fmt: dict) -> StructuredOutputsParams | None:
    kind = fmt.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return StructuredOutputsParams(json_object=True, param="response_format")
    if kind == "json_schema":
        spec = fmt.get("json_schema")
        if not isinstance(spec, dict):
            raise bad_request("response_format.json_schema is required for type "
                              "json_schema", param="response_format.json_schema")
        schema = spec.get("schema", {"type": "object"})   # OpenAI: schema is optional
        strict = spec.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise bad_request("response_format.json_schema.strict must be a boolean",
                              param="response_format.json_schema.strict")
        # strict or not, the schema is enforced: undeclared properties never appear
        return StructuredOutputsParams(json=schema, param="response_format.json_schema")
    raise bad_request(f"response_format.type must be text, json_object or json_schema; "
                      f"got {kind!r}", param="response_format.type")
