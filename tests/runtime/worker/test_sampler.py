"""Batched sampler: masks, penalties, min_tokens, seeds and logprobs against hand-computed values."""
import pytest
import torch

from kubellm.runtime.worker.sampler import Sampler, SamplingState, _apply_penalties, _mask_top_k_top_p
from kubellm.runtime.core.sampling_params import SamplingParams

VOCAB = 64
EOS = 7


def state(prompt=(1, 2, 3), output=(), device="cpu", **params):
    s = SamplingState.create(SamplingParams(**params), list(prompt), device=device)
    s.output_token_ids.extend(output)
    return s


def spread_logits(rows=1, seed=0):
    """Logits with clearly separated values, so that masks have unambiguous borders."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, VOCAB, generator=g) * 3


def draw_many(logits_row, num_draws, **params):
    states = [state(**params) for _ in range(num_draws)]
    return Sampler({EOS})(logits_row.expand(num_draws, -1), states).token_ids


def test_greedy_batch_is_argmax_in_any_dtype():
    logits = spread_logits(256)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        out = Sampler({EOS})(logits.to(dtype), [state(temperature=0.0) for _ in range(256)])
        assert out.token_ids == logits.to(dtype).float().argmax(-1).tolist()
        assert out.logprobs == [None] * 256


def test_top_k_1_equals_greedy():
    logits = spread_logits(32, seed=1)
    out = Sampler({EOS})(logits, [state(temperature=1.3, top_k=1) for _ in range(32)])
    assert out.token_ids == logits.argmax(-1).tolist()


def test_mixed_batch_keeps_greedy_rows_greedy():
    logits = spread_logits(6, seed=2)
    states = [state(temperature=0.0 if i % 2 else 5.0) for i in range(6)]
    tokens = Sampler({EOS})(logits, states).token_ids
    argmax = logits.argmax(-1).tolist()
    assert [tokens[i] for i in (1, 3, 5)] == [argmax[i] for i in (1, 3, 5)]


def test_sampler_does_not_modify_callers_logits():
    logits = spread_logits(4, seed=3)
    before = logits.clone()
    Sampler({EOS})(logits, [state(output=(5,), temperature=0.5, top_p=0.5,
                                  repetition_penalty=2.0, min_tokens=3) for _ in range(4)])
    assert torch.equal(logits, before)


def test_top_k_draws_only_the_k_largest():
    logits = spread_logits(seed=4)[0]
    tokens = draw_many(logits, 2000, temperature=2.0, top_k=5)
    allowed = set(logits.topk(5).indices.tolist())
    assert set(tokens) == allowed      # never outside, and each of the five shows up


@pytest.mark.parametrize("top_p", [0.3, 0.75, 0.95])
def test_top_p_draws_only_from_the_nucleus(top_p):
    logits = spread_logits(seed=5)[0]
    temperature = 1.5
    probs = (logits / temperature).softmax(-1)
    sorted_probs, order = probs.sort(descending=True)
    # Smallest prefix whose mass reaches top_p.
    size = int((sorted_probs.cumsum(0) < top_p).sum()) + 1
    allowed = set(order[:size].tolist())
    tokens = draw_many(logits, 3000, temperature=temperature, top_p=top_p)
    assert set(tokens) <= allowed
    assert len(set(tokens)) >= min(size, 2)


@pytest.mark.parametrize("top_p, kept", [(0.5, {0}), (0.79, {0, 1}),
                                         (0.81, {0, 1, 2}), (0.96, {0, 1, 2, 3})])
def test_top_p_keeps_the_smallest_prefix_reaching_the_mass(top_p, kept):
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    logits = probs.log()[:, [2, 0, 3, 1]]          # shuffled, so the sort matters
    kept = {[2, 0, 3, 1].index(i) for i in kept}    # the same tokens, at their new columns
    _mask_top_k_top_p(logits, [-1], [top_p])
    assert set(torch.isfinite(logits[0]).nonzero().flatten().tolist()) == kept


def test_min_p_draws_only_tokens_above_the_threshold():
    logits = spread_logits(seed=6)[0]
    probs = logits.softmax(-1)
    allowed = set(torch.nonzero(probs >= 0.05 * probs.max()).flatten().tolist())
    tokens = draw_many(logits, 3000, temperature=1.0, min_p=0.05)
    assert set(tokens) <= allowed
    assert len(set(tokens)) > 1


def test_top_k_and_top_p_combine():
    logits = spread_logits(seed=7)[0]
    tokens = draw_many(logits, 2000, temperature=3.0, top_k=4, top_p=0.9)
    assert set(tokens) <= set(logits.topk(4).indices.tolist())


def test_sampling_follows_the_distribution():
    logits = torch.full((1, VOCAB), -50.0)
    logits[0, [10, 20]] = torch.tensor([0.0, torch.log(torch.tensor(3.0))])
    tokens = draw_many(logits[0], 4000, temperature=1.0)
    share_20 = tokens.count(20) / len(tokens)
    assert set(tokens) == {10, 20}
    assert 0.70 < share_20 < 0.80       # expected 0.75


def run_seeded(position, batch_size, steps=8, seed=1234, device="cpu", **params):
    """Tokens of one seeded request decoded at `position` among other requests."""
    target = state(seed=seed, temperature=1.0, device=device, **params)
    others = [state(temperature=1.0, seed=None if i % 2 else 99 + i, device=device)
              for i in range(batch_size - 1)]
    sampler, tokens = Sampler({EOS}), []
    for step in range(steps):
        logits = spread_logits(batch_size, seed=100 + step) * 0.3   # flat: many candidates
        # The target always sees the same logits row, whatever its position.
        target_row = spread_logits(1, seed=500 + step)[0] * 0.3
        logits[position] = target_row
        logits = logits.to(device)
        batch = others[:position] + [target] + others[position:]
        token = sampler(logits, batch).token_ids[position]
        target.output_token_ids.append(token)
        tokens.append(token)
    return tokens


def test_seed_gives_same_tokens_whatever_the_batch():
    alone = run_seeded(0, 1)
    assert run_seeded(3, 7) == alone
    assert run_seeded(6, 7, top_p=1.0) == alone
    assert run_seeded(0, 1, seed=4321) != alone


def test_child_samples_use_seed_plus_index():
    params = SamplingParams(seed=10, temperature=1.0)
    child = SamplingState.create(params, [1], sample_index=2)
    same = SamplingState.create(params.clone(seed=12), [1])
    draws = [torch.rand(4, generator=s.generator) for s in (child, same)]
    assert torch.equal(*draws)
    assert SamplingState.create(SamplingParams(), [1]).generator is None


def test_penalties_change_exactly_the_right_logits():
    logits = torch.tensor([[2.0, -1.0, 0.5, 3.0, -2.0, 1.0]])
    s = SamplingState(SamplingParams(repetition_penalty=2.0, frequency_penalty=0.5,
                                     presence_penalty=0.25),
                      prompt_token_ids=[0, 1], output_token_ids=[3, 3, 4])
    _apply_penalties(logits, [s])
    expected = torch.tensor([[
        2.0 / 2,                       # prompt token, positive: divided
        -1.0 * 2,                      # prompt token, negative: multiplied
        0.5,                           # unseen
        3.0 / 2 - 0.5 * 2 - 0.25,      # output twice: repetition, then frequency*2 + presence
        -2.0 * 2 - 0.5 * 1 - 0.25,     # output once
        1.0,                           # unseen
    ]])
    torch.testing.assert_close(logits, expected)


def test_frequency_and_presence_ignore_the_prompt():
    logits = torch.ones(5, 5)
    states = [SamplingState(SamplingParams(frequency_penalty=1.0), [0, 1, 2], [2]),
              SamplingState(SamplingParams(), [0, 1, 2], [2]),      # no penalty: untouched
              # Rows of different lengths (padding) and empty ones (nothing to penalize).
              SamplingState(SamplingParams(presence_penalty=0.5), [1], [4, 3, 4, 4]),
              SamplingState(SamplingParams(frequency_penalty=2.0), [0, 1], []),
              SamplingState(SamplingParams(repetition_penalty=2.0), [], [])]
    _apply_penalties(logits, states)
    assert logits.tolist() == [[1, 1, 0, 1, 1], [1, 1, 1, 1, 1], [1, 1, 1, 0.5, 0.5],
                               [1, 1, 1, 1, 1], [1, 1, 1, 1, 1]]


def test_repetition_penalty_steers_greedy():
    logits = torch.zeros(1, VOCAB)
    logits[0, 5], logits[0, 6] = 3.0, 2.0
    plain = Sampler({EOS})(logits, [state(prompt=[5], temperature=0.0)]).token_ids
    penalized = Sampler({EOS})(logits, [state(prompt=[5], temperature=0.0,
                                              repetition_penalty=2.0)]).token_ids
    assert (plain, penalized) == ([5], [6])


def test_min_tokens_masks_eos_and_stop_tokens():
    logits = torch.zeros(1, VOCAB)
    logits[0, EOS], logits[0, 9], logits[0, 11] = 10.0, 9.0, 1.0
    sampler = Sampler({EOS})
    for produced in range(3):
        s = state(output=[1] * produced, temperature=0.0, min_tokens=3, stop_token_ids=[9])
        assert sampler(logits, [s]).token_ids == [11]
    s = state(output=[1] * 3, temperature=0.0, min_tokens=3, stop_token_ids=[9])
    assert sampler(logits, [s]).token_ids == [EOS]
    # Sampling rows are masked too.
    s = state(temperature=1.0, min_tokens=2, stop_token_ids=[9])
    assert not {EOS, 9} & set(sampler(logits.expand(500, -1), [s] * 500).token_ids)


def test_a_steady_batch_sampled_again_still_honours_min_tokens():
    """A steady decode hands the sampler the same states list step after step, and the
    sampler keeps what the list's parameters say (sampler._BatchFacts); how many tokens a
    row has so far still decides, at every step, whether its EOS may win."""
    logits = torch.zeros(2, VOCAB)
    logits[:, EOS], logits[:, 11] = 10.0, 1.0
    sampler = Sampler({EOS})
    states = [state(temperature=0.0, min_tokens=2), state(temperature=0.0)]
    assert sampler(logits, states).token_ids == [11, EOS]
    states[0].output_token_ids.append(11)
    assert sampler(logits, states).token_ids == [11, EOS]
    states[0].output_token_ids.append(11)      # min_tokens reached
    assert sampler(logits, states).token_ids == [EOS, EOS]
    logprob_states = [state(temperature=0.0, logprobs=2)]   # a new list: new facts
    assert sampler(logits[:1], logprob_states).logprobs[0] is not None


def test_min_tokens_with_ignore_eos_leaves_eos_alone():
    logits = torch.zeros(1, VOCAB)
    logits[0, EOS] = 10.0
    s = state(temperature=0.0, min_tokens=3, ignore_eos=True)
    assert Sampler({EOS})(logits, [s]).token_ids == [EOS]


def test_logprobs_hold_sampled_and_top_k_from_raw_logits():
    logits = spread_logits(3, seed=8).to(torch.bfloat16)
    states = [state(temperature=0.8, logprobs=3, repetition_penalty=1.5),
              state(temperature=0.0),
              state(temperature=0.0, logprobs=0)]
    out = Sampler({EOS})(logits, states)
    raw = logits.float().log_softmax(-1)
    first, second, third = out.logprobs
    assert second is None
    assert out.token_ids[0] in first
    top3 = raw[0].topk(3).indices.tolist()
    assert set(top3) <= set(first) and len(first) in (3, 4)
    for token, value in first.items():
        assert value == pytest.approx(raw[0, token].item(), abs=1e-6)
    assert third == {out.token_ids[2]: pytest.approx(raw[2].max().item(), abs=1e-6)}
    assert list(first)[0] == out.token_ids[0]       # the sampled token comes first


def test_bad_shapes_are_clear_errors():
    sampler = Sampler({EOS})
    with pytest.raises(ValueError, match="2 rows but 1 states"):
        sampler(torch.zeros(2, VOCAB), [state()])
    with pytest.raises(ValueError, match=r"\[batch, vocab\]"):
        sampler(torch.zeros(VOCAB), [state()])


@pytest.mark.gpu
def test_on_cuda_seeds_masks_and_penalties_hold():
    if not torch.cuda.is_available():
        pytest.skip(reason="needs a CUDA GPU")
    alone = run_seeded(0, 1, device="cuda")
    assert run_seeded(5, 9, device="cuda") == alone
    assert run_seeded(200, 256, device="cuda", steps=3) == alone[:3]
    # Masks: the nucleus computed on the CPU bounds what the GPU draws. These logits' top
    # token holds 0.63 of the mass: top_p 0.8 keeps 4 tokens (0.6 kept it alone, and no
    # draw could then differ, which the first H200 run of this test showed)
    logits = spread_logits(seed=5)[0]
    tokens = Sampler({EOS})(logits.cuda().expand(4000, -1),
                            [state(temperature=1.0, top_p=0.8, top_k=10, min_p=0.01)] * 4000
                            ).token_ids
    probs, order = logits.softmax(-1).sort(descending=True)
    nucleus = set(order[:int((probs.cumsum(0) < 0.8).sum()) + 1].tolist())
    assert len(nucleus) > 1
    assert set(tokens) <= nucleus and len(set(tokens)) > 1
    # Penalties: same numbers as on the CPU.
    batch = spread_logits(3, seed=9)
    states = [state(prompt=[1, 2, 40], output=[2, 2, 5], temperature=0.0, repetition_penalty=1.3,
                    frequency_penalty=0.4, presence_penalty=0.2) for _ in range(3)]
    on_cpu, on_gpu = batch.clone(), batch.cuda()
    _apply_penalties(on_cpu, states)
    _apply_penalties(on_gpu, states)
    torch.testing.assert_close(on_gpu.cpu(), on_cpu)
