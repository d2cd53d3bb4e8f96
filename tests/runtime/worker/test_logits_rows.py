"""The LM head runs only for the rows that sample: a prefill chunk of hundreds of prompt
tokens computes one row of logits (its last token, and only when the chunk reaches the
end of the prompt), never one per prompt token."""
from kubellm.runtime import LLM, SamplingParams


def test_prefill_steps_compute_logits_for_sampling_rows_only(tiny_model_dir):
    llm = LLM(tiny_model_dir, dtype="float32", max_num_batched_tokens=64, block_size=16)
    model = llm.engine.executor.model
    rows_per_call = []
    compute_logits = model.compute_logits

    def recording(hidden):
        rows_per_call.append(hidden.shape[0])
        return compute_logits(hidden)
    model.compute_logits = recording
    prompts = [list(range(100, 300)), list(range(500, 530))]   # 200 and 30 tokens
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=3, ignore_eos=True))
    assert [len(o.outputs[0].token_ids) for o in outs] == [3, 3]
    # 230 prompt tokens in chunks of 64, then decodes: at most one row per request per
    # step, and steps whose chunk ends mid-prompt compute none (3 x 2 samples in all)
    assert max(rows_per_call) <= 2
    assert sum(rows_per_call) == 6
