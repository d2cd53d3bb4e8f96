"""LLMEngine / LLM behaviour seen by callers: seeds, n, stop strings, logprobs, abort."""
import pytest

from kubellm.runtime import LLM, SamplingParams
from kubellm.runtime.engine.llm_engine import PromptTooLongError


@pytest.fixture(scope="module")
def llm(tiny_model_dir):
    return LLM(tiny_model_dir, max_model_len=256)


def test_same_seed_same_text_whatever_the_batch(llm):
    params = SamplingParams(temperature=1.0, top_p=0.9, max_tokens=12, seed=42,
                            ignore_eos=True)
    alone = llm.generate(["Once upon a time"], params)[0].outputs[0].token_ids
    noise = SamplingParams(temperature=1.0, max_tokens=20, ignore_eos=True)
    batch = llm.generate(["a b c", "Once upon a time", "x y z w"],
                         [noise, params, noise])
    assert batch[1].outputs[0].token_ids == alone


def test_n_samples_and_pre_tokenized_prompts(llm):
    tok = llm.get_tokenizer()
    ids = tok.encode("Hello there")
    out = llm.generate([ids], SamplingParams(n=3, temperature=1.0, seed=7, max_tokens=6,
                                             ignore_eos=True))[0]
    assert [o.index for o in out.outputs] == [0, 1, 2]
    assert all(len(o.token_ids) == 6 and o.finish_reason == "length" for o in out.outputs)
    assert len({tuple(o.token_ids) for o in out.outputs}) > 1   # seeds differ per sample
    assert out.prompt_token_ids == ids


def test_greedy_text_is_the_decode_of_the_tokens(llm):
    out = llm.generate("The sky is", SamplingParams(temperature=0, max_tokens=10,
                                                    ignore_eos=True))[0].outputs[0]
    assert out.text == llm.get_tokenizer().decode(out.token_ids, skip_special_tokens=True)


def test_stop_string_cuts_text_and_sets_reason(llm):
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    full = llm.generate("The sky is", params)[0].outputs[0]
    stop = full.text[len(full.text) // 2: len(full.text) // 2 + 3]
    if not stop.strip():
        pytest.skip(reason=f"generated text has no usable middle substring: {full.text!r}")
    cut = llm.generate("The sky is", params.clone(stop=[stop]))[0].outputs[0]
    assert cut.finish_reason == "stop" and cut.stop_reason == stop
    assert cut.text == full.text[:full.text.index(stop)]


def test_stop_token_ids(llm):
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    full = llm.generate("The sky is", params)[0].outputs[0]
    target = full.token_ids[3]
    out = llm.generate("The sky is", params.clone(stop_token_ids=[target]))[0].outputs[0]
    assert out.token_ids == full.token_ids[:full.token_ids.index(target) + 1]
    assert out.finish_reason == "stop" and out.stop_reason == target


def test_logprobs_hold_the_sampled_token_and_top_k(llm):
    out = llm.generate("The sky is", SamplingParams(temperature=0, max_tokens=4,
                                                    logprobs=3))[0].outputs[0]
    assert len(out.logprobs) == len(out.token_ids)
    for token, lps in zip(out.token_ids, out.logprobs):
        assert token in lps and len(lps) >= 3
        assert lps[token] == max(lps.values())       # greedy picks the most likely


def test_abort_frees_blocks_at_once(llm):
    engine = llm.engine
    engine.add_request("abort-me", "Tell me a long story", SamplingParams(
        max_tokens=200, ignore_eos=True))
    for _ in range(3):
        engine.step()
    assert engine.kv.num_free_blocks < engine.kv.num_blocks
    engine.abort_request("abort-me")
    assert engine.kv.num_free_blocks == engine.kv.num_blocks
    assert not engine.has_unfinished_requests()


def test_prompt_longer_than_max_model_len_is_rejected(llm):
    with pytest.raises(PromptTooLongError, match="max_model_len"):
        llm.engine.add_request("too-long", list(range(100, 400)), SamplingParams())
    assert not llm.engine.has_unfinished_requests()


def test_duplicate_request_id_is_rejected(llm):
    llm.engine.add_request("dup", "hi", SamplingParams(max_tokens=1))
    with pytest.raises(ValueError, match="dup"):
        llm.engine.add_request("dup", "hi", SamplingParams(max_tokens=1))
    llm.engine.abort_request("dup")


def test_dummy_weights_without_tokenizer(tmp_path, tiny_model_dir):
    """Benchmarks run shapes with no checkpoint and no tokenizer: config.json alone."""
    import shutil
    shutil.copy(f"{tiny_model_dir}/config.json", tmp_path / "config.json")
    llm = LLM(str(tmp_path), load_format="dummy", skip_tokenizer_init=True)
    out = llm.generate([[5, 6, 7]], SamplingParams(max_tokens=3, ignore_eos=True))[0]
    assert len(out.outputs[0].token_ids) == 3 and out.outputs[0].text == ""
    with pytest.raises(ValueError, match="token ids"):
        llm.generate("text needs a tokenizer", SamplingParams(max_tokens=1))


def test_empty_prompt_is_a_parameter_error(llm):
    from kubellm.runtime.core.sampling_params import ParameterError
    with pytest.raises(ParameterError) as err:
        llm.engine.add_request("empty", [], SamplingParams())
    assert err.value.param == "prompt"


def test_streamed_outputs_are_stable_views_and_final_outputs_lists(llm):
    """A running request's output is a view of the tokens at that step: later steps do
    not change it; the finished output holds a plain list."""
    engine = llm.engine
    engine.add_request("view", "Once", SamplingParams(max_tokens=6, ignore_eos=True, logprobs=1))
    seen = []
    while engine.has_unfinished_requests():
        seen += [o.outputs[0] for o in engine.step()]
    for step, out in enumerate(seen[:-1], start=1):
        assert len(out.token_ids) == step and len(out.logprobs) == step
        assert list(out.token_ids) == seen[-1].token_ids[:step]
        assert out.token_ids[-1] == seen[-1].token_ids[step - 1]
    assert isinstance(seen[-1].token_ids, list) and len(seen[-1].token_ids) == 6


def test_a_tokenized_prompt_is_not_encoded_again(llm):
    """The server tokenizes a text prompt to check its length and hands the ids along;
    the engine must use them (and keep the text), not encode the text a second time."""
    from kubellm.runtime.engine.llm_engine import TokenizedPrompt
    text = "The capital of France is"
    ids = llm.get_tokenizer().encode(text)
    marked = ids[:-1] + [ids[-1] + 1]        # ids the text would not encode to
    engine = llm.engine
    engine.add_request("tok", TokenizedPrompt(text, marked),
                       SamplingParams(max_tokens=2, temperature=0.0))
    out = None
    while engine.has_unfinished_requests():
        out = next((o for o in engine.step() if o.finished), out)
    engine.step()
    assert out.prompt == text and out.prompt_token_ids == marked


def test_a_token_id_list_holds_ints_only(llm):
    """A bool is not a token id, nor a float or a string; an int subclass that is not a
    bool (an IntEnum) is. The common all-int case takes a fast path (_all_token_ids)."""
    import enum

    from kubellm.runtime.core.sampling_params import ParameterError
    engine = llm.engine
    assert engine.tokenize_prompt([5, 6, 7]) == (None, [5, 6, 7])
    assert engine.tokenize_prompt((5, 6)) == (None, [5, 6])

    class Tok(enum.IntEnum):
        A = 5
    assert engine.tokenize_prompt([Tok.A, 6]) == (None, [Tok.A, 6])
    for bad in ([5, True], [5, 6.0], [5, "6"], [None]):
        with pytest.raises(ParameterError, match="prompt"):
            engine.tokenize_prompt(bad)
