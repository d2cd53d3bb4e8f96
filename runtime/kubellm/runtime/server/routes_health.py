"""Probes and metadata: /health (liveness), /ready (readiness), /metrics, /version,
GET /v1/models."""
from __future__ import annotations

import time

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from kubellm.runtime.version import __version__
from kubellm.runtime.server.errors import APIError, unavailable

router = APIRouter()
STARTED = int(time.time())


@router.get("/health")
async def health(request: Request):
    """Liveness: the process answers and the engine loop still runs. Draining is healthy:
    a pod that is finishing its requests must not be killed for it."""
    state = request.app.state.kubellm
    if not state.engine_client.is_alive:
        raise APIError(503, "the engine core is not running", code="engine_dead")
    return {"status": "ok"}


@router.get("/ready")
async def ready(request: Request):
    """Readiness: weights loaded (the app exists only after that), loop alive, not draining."""
    state = request.app.state.kubellm
    if state.is_draining:
        raise unavailable("server is shutting down")
    if not state.engine_client.is_alive:
        raise unavailable("the engine core is not running")
    if not state.engine_client.is_connected:
        raise unavailable("waiting for the engine core's first answer")
    return {"status": "ready"}


@router.get("/metrics")
async def metrics(request: Request):
    registry = request.app.state.kubellm.metrics.exposition_registry()
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


@router.get("/version")
async def version():
    return {"version": __version__}


@router.get("/v1/models")
async def models(request: Request):
    state = request.app.state.kubellm
    return JSONResponse({"object": "list", "data": [
        {"id": state.model_name, "object": "model", "created": STARTED, "owned_by": "kubellm",
         "max_model_len": state.max_model_len}]})
