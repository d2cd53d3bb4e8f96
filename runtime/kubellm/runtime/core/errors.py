"""Errors of an engine as a whole, shared by the engine, its executors and the server."""
from __future__ import annotations


class EngineDeadError(RuntimeError):
    """The engine cannot run any more request: it was shut down, or a part of it (a
    worker process, a rank of its process group) failed. Its requests fail with this;
    other engines in the same process are not affected. (vLLM's name for it.)"""
