"""The offline API as vLLM users write it: generate(prompts, sampling_params=...), prompt
dicts, LLM.chat (tools, templates), generation_config defaults, and arguments checked
before anything is queued."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kubellm.runtime import LLM, SamplingParams
from kubellm.runtime.core.sampling_params import ParameterError
from kubellm.runtime.core.structured_outputs import StructuredOutputsParams

TEMPLATES = Path(__file__).parents[1] / "server" / "chat_templates"
GREEDY = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)


@pytest.fixture(scope="module")
def llm(tiny_model_dir):
    return LLM(tiny_model_dir, max_model_len=512)


def test_sampling_params_keyword_and_prompt_forms(llm):
    tok = llm.get_tokenizer()
    ids = tok.encode("Hello there")
    want = llm.generate("Hello there", GREEDY)[0].outputs[0].token_ids
    outs = llm.generate(["Hello there", ids, {"prompt": "Hello there"},
                         {"prompt_token_ids": ids}], sampling_params=GREEDY)
    assert [o.outputs[0].token_ids for o in outs] == [want] * 4
    assert outs[3].prompt_token_ids == ids
    single = llm.generate({"prompt_token_ids": ids}, sampling_params=GREEDY)
    assert single[0].outputs[0].token_ids == want


def test_chat_renders_the_template(llm):
    messages = [{"role": "user", "content": "Hi"}]
    out = llm.chat(messages, GREEDY)[0]
    text = llm.get_tokenizer().apply_chat_template(messages, tokenize=False,
                                                   add_generation_prompt=True)
    assert out.prompt == text
    both = llm.chat([messages + [{"role": "assistant", "content": "Hel"}],
                     [{"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Go"}]],
                    GREEDY, add_generation_prompt=False, continue_final_message=True)
    assert both[0].prompt.endswith("Hel") and both[1].prompt.endswith("Go")


def test_chat_with_tools_and_a_template_file(llm):
    tools = [{"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {}}}}]
    out = llm.chat([{"role": "user", "content": "Time?"}], GREEDY, tools=tools,
                   chat_template=str(TEMPLATES / "hermes.jinja"))[0]
    assert "<tools>" in out.prompt and '"get_time"' in out.prompt


def test_structured_outputs_offline(llm):
    params = SamplingParams(temperature=1.0, seed=0, max_tokens=40,
                            structured_outputs=StructuredOutputsParams(choice=["yes", "no"]))
    assert llm.generate("Answer:", params)[0].outputs[0].text in ("yes", "no")
    # the plain-data form, as it crosses a process boundary
    as_dict = SamplingParams(temperature=1.0, seed=0, max_tokens=40,
                             structured_outputs={"regex": "[0-9]{3}"})
    assert len(llm.generate("Number:", as_dict)[0].outputs[0].text) == 3


@pytest.mark.parametrize("call,error", [
    (lambda llm: llm.generate(["a", "b"], GREEDY, priority=[1]), ValueError),
    (lambda llm: llm.generate(["a", "b"], [GREEDY]), ValueError),
    (lambda llm: llm.generate(["a", {"prompt_ids": [1]}], GREEDY), ParameterError),
    (lambda llm: llm.generate(["a", "b"], [GREEDY, GREEDY.clone(
        structured_outputs={"regex": "(unclosed"})]), ParameterError),
    (lambda llm: llm.generate(["a", "b"], [GREEDY, GREEDY.clone(
        logit_bias={10**8: 1.0})]), ParameterError),
    (lambda llm: llm.generate(["a", "b"], [GREEDY, GREEDY.clone(logprobs=50)]),
     ParameterError),
    (lambda llm: llm.chat([{"role": "user", "content": "x"}], GREEDY,
                          chat_template="{{ raise_exception('no') }}"), ParameterError),
], ids=["priority-length", "params-length", "prompt-dict-key", "grammar", "logit-bias",
        "max-logprobs", "template"])
def test_bad_arguments_queue_nothing(llm, call, error):
    with pytest.raises(error):
        call(llm)
    assert not llm.engine.has_unfinished_requests()
    assert not llm.engine.scheduler.waiting and not llm.engine.scheduler.running


def test_generation_config_defaults(tiny_model_dir, tmp_path):
    model = Path(shutil.copytree(tiny_model_dir, tmp_path / "model"))
    config = json.loads((model / "generation_config.json").read_text())
    config.update(temperature=0.0, top_k=5, max_new_tokens=3)
    (model / "generation_config.json").write_text(json.dumps(config))
    llm = LLM(str(model), max_model_len=128, num_kv_blocks=16)
    defaults = llm.get_default_sampling_params()
    assert (defaults.temperature, defaults.top_k, defaults.max_tokens) == (0.0, 5, 3)
    assert len(llm.generate("Hi")[0].outputs[0].token_ids) <= 3
    plain = LLM(str(model), max_model_len=128, num_kv_blocks=16, generation_config="vllm")
    assert plain.get_default_sampling_params().temperature == 1.0


def test_prompt_logprobs_refused_across_processes():
    from kubellm.runtime.config import EngineConfig
    from kubellm.runtime.engine.request_checks import check_params
    config = EngineConfig(tensor_parallel_size=2, max_logprobs=-1)
    with pytest.raises(ParameterError, match="prompt_logprobs"):
        check_params(SamplingParams(prompt_logprobs=1), config, vocab_size=100)
    check_params(SamplingParams(logprobs=100), config, vocab_size=100)   # -1: the vocabulary
    with pytest.raises(ParameterError, match="logprobs"):
        check_params(SamplingParams(logprobs=101), config, vocab_size=100)


def test_reset_prefix_cache_makes_the_next_prompt_compute_again(llm):
    prompt = list(range(10, 90))                       # 80 tokens: several full blocks
    params = SamplingParams(temperature=0, max_tokens=2, ignore_eos=True)
    llm.generate([prompt], params)
    assert llm.generate([prompt], params)[0].num_cached_tokens > 0
    assert llm.reset_prefix_cache() is True
    assert llm.generate([prompt], params)[0].num_cached_tokens == 0
