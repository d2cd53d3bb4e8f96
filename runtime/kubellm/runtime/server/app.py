"""build_app(client, tokenizer, info, config): the FastAPI application of one front end.

The app exists only once the engine core has loaded the weights, so a pod's readiness
probe cannot pass early; the client's connection and the preprocessing threads start and
stop with the app's lifespan.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager

from fastapi import FastAPI

from kubellm.runtime.engine.chat import load_chat_template
from kubellm.runtime.version import __version__
from kubellm.runtime.engine_core.core_proc import CoreInfo
from kubellm.runtime.server import (routes_health, routes_openai, routes_tokenize,
                                    routes_websocket)
from kubellm.runtime.server.admission import AdmissionMiddleware
from kubellm.runtime.server.body_limit import BodyLimitMiddleware
from kubellm.runtime.server.config import ServerConfig
from kubellm.runtime.server.errors import install_error_handlers
from kubellm.runtime.server.metrics import ServerMetrics
from kubellm.runtime.server.state import ServerState


def build_app(engine_client, tokenizer, info: CoreInfo, config: ServerConfig) -> FastAPI:
    model_name = config.served_model_name or info.model_name
    metrics = ServerMetrics(model_name, info.max_model_len, info.cache_config)
    pool = ThreadPoolExecutor(config.tokenizer_pool_size, thread_name_prefix="kubellm-prep")
    state = ServerState(engine_client=engine_client, tokenizer=tokenizer,
                        model_name=model_name, max_model_len=info.max_model_len,
                        vocab_size=info.vocab_size,
                        max_chars_per_token=max_chars_per_token(tokenizer), config=config,
                        metrics=metrics, preprocess_pool=pool,
                        generation_defaults=dict(info.generation_defaults),
                        max_logprobs=info.max_logprobs,
                        chat_template=load_chat_template(config.chat_template))
    metrics.attach(state)
    if hasattr(engine_client, "num_preparing"):   # the engine core's client
        engine_client.num_preparing = lambda: state.num_preprocessing

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        engine_client.start()
        try:
            yield
        finally:
            engine_client.stop()
            pool.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(title="kubellm", version=__version__, lifespan=lifespan,
                  docs_url=None, redoc_url=None)
    app.state.kubellm = state
    install_error_handlers(app)
    app.add_middleware(BodyLimitMiddleware)
    app.add_middleware(AdmissionMiddleware)  # added last: runs first (401/503 before 413)
    for module in (routes_health, routes_openai, routes_tokenize, routes_websocket):
        app.include_router(module.router)
    return app


def max_chars_per_token(tokenizer) -> int:
    """An upper bound on the characters one token stands for: its vocabulary entry's
    length (byte-level vocabularies spell each byte as one character, and a character is
    at least one byte), times 4 where a normalizer could fold several characters into
    one (NFC composition) before the model sees them."""
    longest = max((len(piece) for piece in tokenizer.get_vocab()), default=1)
    backend = getattr(tokenizer, "backend_tokenizer", None)
    folds = backend is None or backend.normalizer is not None
    return max(1, longest) * (4 if folds else 1)
