"""The runner hands the sampler the LM head's logits in the model's dtype: an all-greedy
batch takes its argmax on them as they are (no fp32 copy written and read back), and the
other paths make their own fp32 copy (test_sampler.py checks those in every dtype)."""
import torch

from kubellm.runtime import LLM, SamplingParams
from kubellm.runtime.worker.sampler import Sampler


def test_a_bf16_model_samples_from_bf16_logits_with_the_same_greedy_tokens(
        tiny_model_dir, monkeypatch):
    seen = []
    real = Sampler.sample

    def recording(self, logits, states, constrained=None):
        seen.append(logits.dtype)
        return real(self, logits, states, constrained)

    prompts = [[5, 9, 13, 21], [7, 3, 11]]
    greedy = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    llm = LLM(tiny_model_dir, dtype="bfloat16", skip_tokenizer_init=True)
    # what the runner did before: widen every step's logits to fp32 first
    monkeypatch.setattr(Sampler, "sample", lambda self, logits, states, constrained=None:
                        real(self, logits.float(), states, constrained))
    want = [o.outputs[0].token_ids for o in llm.generate(prompts, greedy)]
    monkeypatch.setattr(Sampler, "sample", recording)
    got = [o.outputs[0].token_ids for o in llm.generate(prompts, greedy)]
    assert seen and set(seen) == {torch.bfloat16}
    assert got == want
    # a sampled (not greedy) batch gets there too and draws from its own fp32 copy
    seen.clear()
    out = llm.generate(prompts, SamplingParams(temperature=0.8, seed=1, max_tokens=4))
    assert set(seen) == {torch.bfloat16} and all(len(o.outputs[0].token_ids) for o in out)
