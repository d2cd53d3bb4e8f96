"""Incremental detokenization with SmolLM2's real byte-level BPE tokenizer."""
import random

import pytest

from kubellm.runtime.loading.default_model import default_model_path
from kubellm.runtime.core.detokenizer import IncrementalDetokenizer
from kubellm.runtime.core.sampling_params import SamplingParams

PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def tokenizer():
    """The default model's tokenizer, as the engine loads it: from the converted directory
    in KUBELLM_CACHE (converted once per test session, shared with other tests)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(default_model_path())


def stream(tokenizer, output_ids, prompt_ids=None, **params):
    """Feed tokens one at a time; returns (detokenizer, deltas per append, flushed tail)."""
    prompt_ids = tokenizer.encode(PROMPT) if prompt_ids is None else prompt_ids
    detok = IncrementalDetokenizer(tokenizer, prompt_ids, SamplingParams(**params))
    deltas = []
    for token in output_ids:
        deltas.append(detok.append(token))
        if detok.is_stopped:
            break
    return detok, deltas, detok.flush()


def test_first_token_keeps_its_leading_space(tokenizer):
    ids = tokenizer.encode(" Paris.")
    detok, deltas, tail = stream(tokenizer, ids)
    assert deltas[0] == " Paris"
    assert "".join(deltas) + tail == " Paris." == detok.output_text


def test_multibyte_characters_are_never_emitted_half(tokenizer):
    text = " 🦙 llama 東京タワー é 你好世界"
    ids = tokenizer.encode(text)
    # Precondition: this tokenizer really splits characters across tokens.
    assert sum("\ufffd" in tokenizer.decode([i]) for i in ids) >= 5
    detok, deltas, tail = stream(tokenizer, ids)
    assert not any("\ufffd" in d for d in deltas)
    assert "" in deltas                  # something was held back for a later token
    assert "".join(deltas) + tail == text == detok.output_text


@pytest.mark.parametrize("skip_special_tokens", [True, False])
def test_deltas_add_up_to_the_full_decode_for_random_tokens(tokenizer, skip_special_tokens):
    rng = random.Random(1234)
    vocab = len(tokenizer)
    for _ in range(150):
        # Low ids hold the special tokens and the single bytes that split characters.
        def draw():
            return rng.randrange(0, 300) if rng.random() < 0.5 else rng.randrange(vocab)
        prompt = [draw() for _ in range(rng.randrange(0, 8))]
        output = [draw() for _ in range(rng.randrange(1, 30))]
        detok, deltas, tail = stream(tokenizer, output, prompt,
                                     skip_special_tokens=skip_special_tokens)
        expected = tokenizer.decode(output, skip_special_tokens=skip_special_tokens)
        assert "".join(deltas) + tail == expected == detok.output_text, (prompt, output)


def test_deltas_add_up_for_random_multilingual_text(tokenizer):
    rng = random.Random(99)
    alphabet = list("abc xyz.,!?\n") + list("éüßñ東京タワー你好世界한국어") + ["🦙", "👍🏽", "🇫🇷"]
    for _ in range(100):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 25)))
        ids = tokenizer.encode(text)
        detok, deltas, tail = stream(tokenizer, ids)
        assert not any("\ufffd" in d for d in deltas), text
        assert "".join(deltas) + tail == text == tokenizer.decode(ids)


def test_decode_window_stays_short(tokenizer):
    """O(1) per token: no decode call grows with the output length."""
    lengths = []

    class Spy:
        def decode(self, ids, **kwargs):
            lengths.append(len(ids))
            return tokenizer.decode(ids, **kwargs)

    text = "word 東京 " * 150
    ids = tokenizer.encode(text)
    detok, deltas, tail = stream(Spy(), ids, tokenizer.encode(PROMPT))
    assert len(ids) > 400
    assert "".join(deltas) + tail == text
    assert max(lengths) <= 12


def test_stop_string_across_tokens_is_cut_and_never_shown(tokenizer):
    text = " Hello world, the end. More text follows here."
    ids = tokenizer.encode(text)
    stop = "d, the e"
    assert not any(stop in tokenizer.decode([i]) for i in ids)   # really spans tokens
    detok, deltas, tail = stream(tokenizer, ids, stop=[stop])
    assert detok.is_stopped and detok.stop_reason == stop
    # Emitted text only grows, so any part of the stop string shown would remain here.
    assert "".join(deltas) + tail == " Hello worl" == detok.output_text
    assert tail == ""
    with pytest.raises(RuntimeError, match="after the sequence stopped"):
        detok.append(ids[-1])


def test_possible_stop_prefix_is_held_then_released(tokenizer):
    text = " the cat sat on the mat and the dog"
    ids = tokenizer.encode(text)
    detok, deltas, tail = stream(tokenizer, ids, stop=["the mat"])
    assert detok.stop_reason == "the mat"
    assert "".join(deltas) == " the cat sat on "
    # "the" could have begun "the mat": it waited for " cat" (whose "t" waits in turn).
    assert deltas[:3] == [" ", "the ca", "t sa"]


def test_earliest_of_several_stop_strings_wins(tokenizer):
    ids = tokenizer.encode(" one two three four")
    detok, deltas, _ = stream(tokenizer, ids, stop=["four", "two", "three"])
    assert detok.stop_reason == "two"
    assert detok.output_text == " one "


def test_stop_inside_one_token(tokenizer):
    ids = tokenizer.encode(" Hello there")
    detok, deltas, _ = stream(tokenizer, ids, stop=["ll"])
    assert detok.output_text == "".join(deltas) == " He"


def test_stop_at_the_very_first_token(tokenizer):
    ids = tokenizer.encode(" Paris is nice")
    detok, deltas, tail = stream(tokenizer, ids, stop=["Par"])
    assert deltas == [" "] and tail == ""
    assert detok.is_stopped and detok.output_text == " "
    detok, deltas, _ = stream(tokenizer, ids, stop=[" Paris"])
    assert deltas == [""] and detok.output_text == "" and detok.stop_reason == " Paris"


def test_flush_releases_a_tail_that_never_became_a_stop(tokenizer):
    ids = tokenizer.encode(" foo ba")
    detok, deltas, tail = stream(tokenizer, ids, stop=["bar"])
    assert not detok.is_stopped and detok.stop_reason is None
    assert "".join(deltas) == " foo " and tail == "ba"
    assert detok.output_text == " foo ba"


def test_flush_emits_an_unfinished_character_like_decode(tokenizer):
    ids = tokenizer.encode(" 🦙")
    cut = ids[:-1]                                   # the emoji's last byte never comes
    detok, deltas, tail = stream(tokenizer, cut)
    assert deltas == ["", ""]           # " " shares its token with the emoji's first byte
    assert detok.output_text == tail == tokenizer.decode(cut) == " \ufffd"


def test_prompt_ending_inside_a_character(tokenizer):
    ids = tokenizer.encode(" 東京")
    split = next(i for i in range(1, len(ids)) if tokenizer.decode(ids[:i]).endswith("\ufffd"))
    prompt, output = ids[:split], ids[split:]
    detok, deltas, tail = stream(tokenizer, output, prompt)
    assert "".join(deltas) + tail == tokenizer.decode(output)


def test_special_tokens_follow_skip_special_tokens(tokenizer):
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    ids = tokenizer.encode(" Hi") + [eos]
    assert stream(tokenizer, ids)[0].output_text == " Hi"
    assert stream(tokenizer, ids, skip_special_tokens=False)[0].output_text == " Hi<|im_end|>"


def test_hf_fast_tokenizers_decode_through_the_rust_tokenizer(tokenizer):
    """The tests above compare against ``tokenizer.decode`` through this short path; a
    tokenizer class with its own ``_decode`` keeps the full call."""
    from kubellm.runtime.core.detokenizer import raw_decoder
    assert raw_decoder(tokenizer) is not None

    class OwnDecode(type(tokenizer)):
        def _decode(self, *args, **kwargs):
            return super()._decode(*args, **kwargs)

    tokenizer.__class__, original = OwnDecode, type(tokenizer)
    try:
        assert raw_decoder(tokenizer) is None
    finally:
        tokenizer.__class__ = original
