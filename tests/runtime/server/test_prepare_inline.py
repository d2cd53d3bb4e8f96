"""How an API server hands prepared requests to the engine core (generation.start): a small
completions body of token ids is prepared on the event loop (cheaper than the hop to a
preprocessing thread); a large one, or one that needs the tokenizer, on the threads.
Either way the core hears, with each request, how many more the front end has read and
not yet sent, so that an idle core waits for a burst instead of starting a step with its
first request (core_proc's burst gather)."""
import asyncio
import json
import threading
from concurrent.futures import ThreadPoolExecutor

from kubellm.runtime.server import generation
from kubellm.runtime.server.config import ServerConfig
from kubellm.runtime.server.protocol_completions import CompletionRequest
from kubellm.runtime.server.state import ServerState


class _NoMetrics:
    def __getattr__(self, name):
        return lambda *args, **kwargs: None


class _Admitted:
    async def wait_admitted(self):
        return None


class _RecordingCore:
    """An engine client that records what the core would receive."""

    def __init__(self):
        self.sent = []        # (request id, num_preparing at the send, preparing thread)
        self.hints = 0        # PREPARING messages
        self.num_preparing = lambda: 0
        self.prepared_on = {}

    def preparing(self, num_requests):
        self.hints += num_requests

    async def add_request(self, request_id, token_ids, params, priority, prompt=None):
        self.sent.append((len(token_ids), self.num_preparing()))
        return _Admitted()


def _state(core) -> ServerState:
    state = ServerState(engine_client=core, tokenizer=None, model_name="m",
                        max_model_len=8192, vocab_size=1000, max_chars_per_token=64,
                        config=ServerConfig(), metrics=_NoMetrics(),
                        preprocess_pool=ThreadPoolExecutor(1, thread_name_prefix="prep"))
    core.num_preparing = lambda: state.num_preprocessing
    return state


def _body(num_tokens: int) -> bytes:
    return json.dumps({"model": "m", "prompt": [1 + i % 900 for i in range(num_tokens)],
                       "max_tokens": 4}).encode()


def _record_threads(monkeypatch):
    threads = {}
    prepare = generation.prepare

    def recording(state, raw, body_cls):
        prepared = prepare(state, raw, body_cls)
        threads[len(prepared.prompts[0].token_ids)] = threading.current_thread().name
        return prepared
    monkeypatch.setattr(generation, "prepare", recording)
    return threads


def test_small_bodies_read_together_tell_the_core_how_many_follow(monkeypatch):
    threads = _record_threads(monkeypatch)
    core = _RecordingCore()
    state = _state(core)
    sizes = [10, 20, 30, 40]
    assert all(len(_body(n)) <= generation.INLINE_PREPARE_MAX_BYTES for n in sizes)

    async def burst():
        # as uvicorn starts the handlers of bodies read in one turn of the loop
        await asyncio.gather(*(generation.start(state, _body(n), CompletionRequest)
                               for n in sizes))
    asyncio.run(burst())
    assert core.hints == 1                                  # one hint for the burst
    assert core.sent == [(10, 3), (20, 2), (30, 1), (40, 0)]
    loop_thread = threading.current_thread().name
    assert all(threads[n] == loop_thread for n in sizes)   # prepared on the loop
    assert state.num_preprocessing == 0


def test_a_small_text_prompt_goes_to_the_threads(monkeypatch):
    """Tokenizing takes time in proportion to the text (~2 ms at 8 KiB): not on the loop."""
    calls = []

    def text_prompt_threads(state, raw, body_cls):
        calls.append((json.loads(raw)["prompt"], threading.current_thread().name))
        raise generation.bad_request("stop here", param="prompt")
    monkeypatch.setattr(generation, "prepare", text_prompt_threads)
    state = _state(_RecordingCore())
    raw = json.dumps({"model": "m", "prompt": "a short [1, 2] text", "max_tokens": 4}).encode()
    try:
        asyncio.run(generation.start(state, raw, CompletionRequest))
    except generation.APIError:
        pass
    assert calls and calls[0][1].startswith("prep")
    assert state.num_preprocessing == 0


def test_a_large_body_is_prepared_off_the_loop(monkeypatch):
    threads = _record_threads(monkeypatch)
    core = _RecordingCore()
    state = _state(core)
    num_tokens = 4000
    assert len(_body(num_tokens)) > generation.INLINE_PREPARE_MAX_BYTES
    asyncio.run(generation.start(state, _body(num_tokens), CompletionRequest))
    assert threads[num_tokens].startswith("prep")
    assert core.hints == 1 and core.sent == [(num_tokens, 0)]
