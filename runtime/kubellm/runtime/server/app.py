"""build_app(engine, config): the FastAPI application around one loaded engine.

The app exists only once the weights are loaded, so a pod's readiness probe cannot pass
early; the engine thread starts and stops with the app's lifespan.
"""
from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI

from kubellm.runtime.version import __version__
from kubellm.runtime.server import routes_health, routes_openai, routes_websocket
from kubellm.runtime.server.admission import AdmissionMiddleware
from kubellm.runtime.server.async_engine import AsyncLLMEngine, EngineStepError
from kubellm.runtime.server.config import ServerConfig
from kubellm.runtime.server.errors import engine_error, install_error_handlers
from kubellm.runtime.server.metrics import ServerMetrics
from kubellm.runtime.server.state import ServerState


def build_app(engine, config: ServerConfig) -> FastAPI:
    model_name = config.served_model_name or engine.model_name
    async_engine = AsyncLLMEngine(engine)
    metrics = ServerMetrics(model_name)
    metrics.attach(async_engine)
    state = ServerState(async_engine=async_engine, tokenizer=engine.tokenizer,
                        model_name=model_name, max_model_len=engine.config.max_model_len,
                        vocab_size=_vocab_size(engine), config=config, metrics=metrics)

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

    @app.exception_handler(EngineStepError)  # an add that reached a dead engine: 503
    async def _engine_error(_request, exc: EngineStepError):
        return engine_error(exc).response()

    app.add_middleware(AdmissionMiddleware)
    for module in (routes_health, routes_openai, routes_websocket):
        app.include_router(module.router)
    return app


def _vocab_size(engine) -> int:
    """Token ids a prompt may hold: the model's embedding rows, else the tokenizer's size."""
    for owner in (engine, getattr(engine, "executor", None)):
        size = getattr(owner, "vocab_size", None)
        if isinstance(size, int) and size > 0:
            return size
    return len(engine.tokenizer)
