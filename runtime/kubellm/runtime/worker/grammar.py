"""Structured outputs through xgrammar: a request's spec (JSON schema, JSON object, regex,
choice, grammar) compiled once for the model's vocabulary, and one matcher per sequence
that says, before every step, which tokens may come next.

xgrammar was chosen over llguidance and outlines-core on the SmolLM2 tokenizer at batch
64 on CPU: 1-10 us per sequence to fill a mask for JSON schema, choice and grammar
(5-20x below llguidance, up to 10x below outlines), all five request kinds, a built-in
compile cache, the GIL released while filling, and one call that applies the mask on CPU
(C++) and CUDA (Triton). It is imported on first use: the import takes ~3 s.
"""
from __future__ import annotations

import json
import logging
import threading

from kubellm.runtime.core.parameter_error import ParameterError
from kubellm.runtime.core.structured_outputs import StructuredOutputsParams

log = logging.getLogger(__name__)

_CACHE_LIMIT_BYTES = 512 << 20   # xgrammar's compile cache (repeats cost <= 0.1 ms)
# Whitespace characters allowed between JSON tokens. Unbounded, a model can fill its whole
# budget with whitespace inside a JSON object (seen with a random model: 60 tokens of
# newlines and tabs; vLLM users meet it as endless newlines). 20 still allows 4-space
# pretty-printing 4 levels deep. The bound costs compile time (small schema, loaded CPU:
# 8 -> ~40 ms), which the engine core spends on a thread beside its loop
# (engine_core/core_proc.py).
MAX_JSON_WHITESPACE = 20


class GrammarCompiler:
    """Compiles specs for one tokenizer and model vocabulary; thread-safe."""

    def __init__(self, tokenizer, vocab_size: int, stop_token_ids: list[int]):
        import xgrammar as xgr
        self._xgr = xgr
        self.vocab_size = vocab_size
        self.info = tokenizer_info(tokenizer, vocab_size, stop_token_ids)
        self._compiler = xgr.GrammarCompiler(self.info, max_threads=8, cache_enabled=True,
                                             cache_limit_bytes=_CACHE_LIMIT_BYTES)

    def compile(self, spec: StructuredOutputsParams):
        """The compiled grammar, or ParameterError naming the request field."""
        kind = spec.kind
        try:
            if kind == "json":
                return self._compiler.compile_json_schema(
                    json.dumps(spec.schema()), any_whitespace=not spec.disable_any_whitespace,
                    strict_mode=True, **self._whitespace(spec))
            if kind == "json_object":
                # not compile_builtin_json_grammar: that accepts any JSON value ("[1]", "2")
                return self._compiler.compile_json_schema(
                    '{"type": "object"}', any_whitespace=not spec.disable_any_whitespace,
                    **self._whitespace(spec))
            if kind == "regex":
                return self._compiler.compile_regex(spec.regex)
            if kind == "choice":
                return self._compiler.compile_grammar(
                    "root ::= " + " | ".join(json.dumps(c) for c in spec.choice))
            if "::=" in spec.grammar:                 # EBNF / GBNF, root rule "root"
                return self._compiler.compile_grammar(spec.grammar)
            return self._compiler.compile_lark(spec.grammar)   # Lark, root rule "start"
        except (RuntimeError, ValueError, TypeError) as exc:
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ParameterError(spec.param, f"cannot compile the {kind.replace('_', ' ')}: "
                                             f"{message}") from None

    @staticmethod
    def _whitespace(spec: StructuredOutputsParams) -> dict:
        return {} if spec.disable_any_whitespace else {"max_whitespace_cnt": MAX_JSON_WHITESPACE}

    def matcher(self, compiled) -> "GrammarState":
        return GrammarState(self._xgr.GrammarMatcher(compiled))


class GrammarState:
    """One sequence's position in its grammar. It catches up with the tokens sampled
    since the last step right before the next mask is needed, so the engine has nothing
    to call after a step."""

    __slots__ = ("matcher", "num_consumed", "is_broken")

    def __init__(self, matcher):
        self.matcher = matcher
        self.num_consumed = 0
        self.is_broken = False

    def advance(self, output_token_ids: list[int]) -> None:
        for token in output_token_ids[self.num_consumed:]:
            if not self.is_broken and not self.matcher.is_terminated() \
                    and not self.matcher.accept_token(token):
                # only a token the mask allowed can be sampled, so this is a bug; keep the
                # request running unconstrained rather than failing the whole batch
                log.error("grammar rejected token %d after %d tokens; the rest of this "
                          "output is unconstrained", token, self.num_consumed)
                self.is_broken = True
            self.num_consumed += 1

    def fill(self, bitmask, row: int) -> None:
        if not self.is_broken and not self.matcher.is_terminated():
            self.matcher.fill_next_token_bitmask(bitmask, row)


def tokenizer_info(tokenizer, vocab_size: int, stop_token_ids: list[int]):
    """xgrammar's view of the vocabulary, with special added tokens blanked out.

    ``TokenizerInfo.from_huggingface`` reports no special tokens for some tokenizers
    (SmolLM2's, converted from GGUF): ``<|im_start|>`` and the like would then be allowed
    inside JSON strings. An empty string is what xgrammar treats as a special token.
    """
    import xgrammar as xgr
    stops = [t for t in stop_token_ids if t < vocab_size]
    base = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size,
                                              stop_token_ids=stops)
    meta = json.loads(base.dump_metadata())
    encoded = [""] * vocab_size
    for token, token_id in tokenizer.get_vocab().items():
        if token_id < vocab_size:
            encoded[token_id] = token
    for token_id, added in getattr(tokenizer, "added_tokens_decoder", {}).items():
        if added.special and token_id < vocab_size:
            encoded[token_id] = ""
    return xgr.TokenizerInfo(encoded, xgr.VocabType(meta["vocab_type"]),
                             vocab_size=vocab_size, stop_token_ids=stops,
                             add_prefix_space=meta["add_prefix_space"])


class LazyGrammarCompiler:
    """Builds the GrammarCompiler on first use: importing xgrammar takes seconds, and a
    server that never sees a structured request never pays them."""

    def __init__(self, tokenizer, vocab_size: int, stop_token_ids):
        self._args = (tokenizer, vocab_size, sorted(stop_token_ids))
        self._compiler: GrammarCompiler | None = None
        self._lock = threading.Lock()

    def get(self) -> GrammarCompiler:
        with self._lock:
            if self._compiler is None:
                if self._args[0] is None:
                    raise ParameterError("structured_outputs", "this engine has no tokenizer "
                                         "(skip_tokenizer_init): structured outputs need one")
                self._compiler = GrammarCompiler(*self._args)
            return self._compiler
