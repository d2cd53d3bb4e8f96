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


def test_streamed_running_row_is_the_output_make_output_gives():
    """process() builds a running one-sequence output in its loop (inlined): field for
    field what _make_output builds."""
    group = _group(finished=False)
    [seq] = group.sequences
    seq.all_token_ids += [7, 8]
    processor = OutputProcessor(scheduler=None, eos_token_ids={0}, max_model_len=64)
    processor.groups["r"] = group
    [out] = processor.process([seq], {"r#0": {8: -0.125}})
    assert out == processor._make_output(group)
    assert list(out.outputs[0].logprobs) == [{7: -0.5}, {8: -0.25}, {8: -0.125}]


def _running(request_id: str, n: int, output_kind: str) -> Group:
    params = SamplingParams(n=n, output_kind=output_kind)
    seqs = [Request(f"{request_id}#{i}", [1, 2], params, index=i) for i in range(n)]
    group = Group(request_id, None, [1, 2], seqs, [""] * n, 0.0)
    for seq in seqs:
        seq.group = group
        seq.status = Status.RUNNING
        seq.append_token(5)
    return group


def test_outputs_come_in_the_order_requests_were_first_touched():
    """A request of n > 1 sequences takes its place at its first row; a final-only one
    whose sequences are not all done gives no output."""
    for kind, expect in (("cumulative", ["b", "a", "c"]), ("final_only", [])):
        a, b, c = (_running(r, n, kind) for r, n in (("a", 1), ("b", 2), ("c", 1)))
        processor = OutputProcessor(scheduler=None, eos_token_ids={0}, max_model_len=64)
        processor.groups.update(a=a, b=b, c=c)
        rows = [b.sequences[0], a.sequences[0], b.sequences[1], c.sequences[0]]
        outputs = processor.process(rows, {})
        assert [o.request_id for o in outputs] == expect
        if expect:
            assert [len(o.outputs) for o in outputs] == [2, 1, 1]


def test_metrics_handed_out_never_change_afterwards():
    """A running one-sequence request's outputs share one metrics dict from step to step
    (built once, not per step); a preemption or the finish gives later outputs a new
    dict, and every output keeps the values it was handed: an output from before a
    preemption still says 0 preemptions, one from before the finish no finished_time."""
    from kubellm.runtime.core.kv_cache import KVCacheManager
    from kubellm.runtime.core.scheduler import Scheduler
    scheduler = Scheduler(KVCacheManager(5, 4), 32, 8)   # too few blocks: preemptions
    processor = OutputProcessor(scheduler, eos_token_ids={0}, max_model_len=64)
    params = SamplingParams(max_tokens=8)
    for i in range(3):
        seq = Request(f"r{i}#0", [100 + 4 * i + j for j in range(4)], params,
                      arrival_time=float(i), max_tokens=8)
        group = Group(f"r{i}", None, seq.prompt_token_ids, [seq], [""], float(i))
        seq.group = group
        processor.groups[group.request_id] = group
        scheduler.add_request(seq)
    handed = []   # (output, a copy of its metrics when handed out)
    while scheduler.has_unfinished():
        out = scheduler.schedule()
        sampled = {r.request_id: 7 for r, samples in zip(out.requests, out.samples)
                   if samples}
        for o in processor.process(scheduler.update(out, sampled), {}):
            handed.append((o, dict(o.metrics)))
    assert scheduler.num_preemptions > 0
    for o, metrics in handed:
        assert o.metrics == metrics
    for request_id in ("r0", "r1", "r2"):
        outs = [o for o, _ in handed if o.request_id == request_id]
        assert len(outs) == 8 and outs[-1].finished
        assert all(o.metrics["finished_time"] is None for o in outs[:-1])
        assert outs[-1].metrics["finished_time"] is not None
        assert outs[-1].metrics is not outs[-2].metrics
        counts = [o.metrics["num_preemptions"] for o in outs]
        assert counts == sorted(counts)
        for a, b in zip(outs[:-2], outs[1:-1]):   # running outputs: shared while equal
            assert (a.metrics is b.metrics) is (a.metrics == b.metrics)
    preempted = [o for o, _ in handed if o.metrics["num_preemptions"]]
    assert preempted and any(o.request_id == preempted[0].request_id
                             and not o.metrics["num_preemptions"] for o, _ in handed)
