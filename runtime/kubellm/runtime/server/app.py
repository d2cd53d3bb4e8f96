"""build_app(engine, config): the FastAPI application around one loaded engine.

The app exists only once the weights are loaded, so a pod's readiness probe cannot pass
early; the engine thread starts and stops with the app's lifespan.
"""
from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI

from kubellm.runtime.engine.chat import load_chat_template
from kubellm.runtime.version import __version__
from kubellm.runtime.server import (routes_health, routes_openai, routes_tokenize,
                                    routes_websocket)
from kubellm.runtime.server.admission import AdmissionMiddleware
from kubellm.runtime.server.async_engine import AsyncLLMEngine
from kubellm.runtime.server.config import ServerConfig
from kubellm.runtime.server.errors import install_error_handlers
from kubellm.runtime.server.metrics import ServerMetrics
from kubellm.runtime.server.state import ServerState


def build_app(engine, config: ServerConfig) -> FastAPI:
    model_name = config.served_model_name or engine.model_name
    async_engine = AsyncLLMEngine(engine)
    metrics = ServerMetrics(model_name, engine.config.max_model_len)
    metrics.attach(async_engine)
    vocab_size = _vocab_size(engine)
    max_logprobs = getattr(engine.config, "max_logprobs", 20)
    state = ServerState(async_engine=async_engine, tokenizer=engine.tokenizer,
                        model_name=model_name, max_model_len=engine.config.max_model_len,
                        vocab_size=vocab_size, config=config, metrics=metrics,
                        generation_defaults=dict(getattr(engine, "generation_defaults", {})),
                        max_logprobs=vocab_size if max_logprobs == -1 else max_logprobs,
                        chat_template=load_chat_template(config.chat_template))

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        async_engine.start()
        try:
            yield
        finally:
            async_engine.stop()

    app = FastAPI(title="kubellm", version=__version__, lifespan=lifespan,
                  docs_url=None, redoc_url=None)
    app.state.kubellm = state
    install_error_handlers(app)
    app.add_middleware(AdmissionMiddleware)
    for module in (routes_health, routes_openai, routes_tokenize, routes_websocket):
        app.include_router(module.router)
    return app


def _vocab_size(engine) -> int:
    """Token ids a prompt may hold: the model's embedding rows, else the tokenizer's size."""
    for owner in (engine, getattr(engine, "executor", None)):
        size = getattr(owner, "vocab_size", None)
        if isinstance(size, int) and size > 0:
            return size
    return len(engine.tokenizer)
