"""OutputProcessor's streamed output of a one-sequence request, field by field (it builds
the output objects with positional arguments: a field moved in outputs.py must fail)."""
from kubellm.runtime.core.output_processor import Group, OutputProcessor
from kubellm.runtime.core.request import Request, Status
from kubellm.runtime.core.sampling_params import SamplingParams


def _group(finished: bool) -> Group:
    seq = Request("r#0", [1, 2, 3], SamplingParams(logprobs=1), arrival_time=1.0)
    seq.output_token_ids += [7, 8]
    seq.logprobs = [{7: -0.5}, {8: -0.25}]
    seq.num_cached_tokens, seq.num_preemptions = 16, 2
    seq.first_scheduled_time, seq.first_token_time = 2.0, 3.0
    if finished:
        seq.status, seq.finish_reason, seq.stop_reason = Status.FINISHED, "stop", 8
    group = Group("r", "prompt text", [1, 2, 3], [seq], ["text so far"], 1.0,
                  prompt_logprobs=[None, {2: -1.0}])
    seq.group = group
    return group


def test_one_sequence_output_fills_every_field_by_name():
    for finished in (False, True):
        group = _group(finished)
        processor = OutputProcessor(scheduler=None, eos_token_ids={0}, max_model_len=64)
        processor.groups["r"] = group
        out = processor._make_output(group)
        assert (out.request_id, out.prompt, out.prompt_token_ids) == \
            ("r", "prompt text", [1, 2, 3])
        assert out.finished is finished and out.num_cached_tokens == 16
        assert out.prompt_logprobs == [None, {2: -1.0}]
        assert out.metrics["arrival_time"] == 1.0
        assert out.metrics["first_scheduled_time"] == 2.0
        assert out.metrics["first_token_time"] == 3.0
        assert out.metrics["num_preemptions"] == 2
        assert (out.metrics["finished_time"] is not None) is finished
        [completion] = out.outputs
        assert (completion.index, completion.text) == (0, "text so far")
        assert list(completion.token_ids) == [7, 8]
        assert list(completion.logprobs) == [{7: -0.5}, {8: -0.25}]
        assert (completion.finish_reason, completion.stop_reason) == \
            (("stop", 8) if finished else (None, None))
        assert ("r" in processor.groups) is not finished
