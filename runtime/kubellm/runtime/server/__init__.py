"""The OpenAI-compatible HTTP server: FastAPI app over an asyncio wrapper of the engine.

``config`` (ServerConfig), ``async_engine`` (engine loop in its own thread), ``protocol``
(request bodies -> SamplingParams), ``errors`` (OpenAI error shape), ``routes_*``
(endpoints), ``streaming`` (SSE chunks), ``metrics`` (Prometheus), ``lifecycle``
(uvicorn + SIGTERM drain), ``app`` (wires them together).

May import: ``engine``, ``core`` and ``config*``. Nothing below ``engine`` reaches
the server.
"""
