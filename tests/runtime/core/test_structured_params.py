"""SamplingParams' API-parity fields check themselves and stay plain data (what crosses a
process boundary is rebuilt equal from its dict)."""
import dataclasses

import pytest

from kubellm.runtime.core.sampling_params import ParameterError, SamplingParams
from kubellm.runtime.core.structured_outputs import StructuredOutputsParams


def test_plain_data_round_trip():
    params = SamplingParams(logit_bias={"5": -100, 7: 2.5}, allowed_token_ids=[1, 2],
                            prompt_logprobs=3, include_stop_str_in_output=True,
                            structured_outputs={"json": '{"type": "object"}'})
    assert params.logit_bias == {5: -100.0, 7: 2.5}
    assert isinstance(params.structured_outputs, StructuredOutputsParams)
    data = dataclasses.asdict(params)
    assert SamplingParams(**data) == params
    assert params.is_special and params.reads_output_tokens
    assert not SamplingParams().is_special and not SamplingParams(logprobs=5).is_special


@pytest.mark.parametrize("fields,param", [
    (dict(logit_bias={"x": 1}), "logit_bias"),
    (dict(logit_bias={3: 101}), "logit_bias"),
    (dict(allowed_token_ids=[]), "allowed_token_ids"),
    (dict(prompt_logprobs=-1), "prompt_logprobs"),
    (dict(truncate_prompt_tokens=0), "truncate_prompt_tokens"),
    (dict(include_stop_str_in_output="yes"), "include_stop_str_in_output"),
    (dict(structured_outputs={"json": "{", "param": "response_format"}), "response_format"),
    (dict(structured_outputs={"regex": "a", "choice": ["b"]}), "structured_outputs"),
    (dict(structured_outputs={"choice": []}), "structured_outputs"),
    (dict(structured_outputs={"json": [1]}), "structured_outputs"),
    (dict(structured_outputs={"json_object": False}), "structured_outputs"),
    (dict(structured_outputs={"yaml": "a"}), "structured_outputs"),
    (dict(structured_outputs="regex"), "structured_outputs"),
])
def test_bad_fields_name_themselves(fields, param):
    with pytest.raises(ParameterError) as exc:
        SamplingParams(**fields)
    assert exc.value.param == param
