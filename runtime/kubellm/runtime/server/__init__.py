"""The OpenAI-compatible HTTP server: API server processes in front of the engine core.

``supervisor`` (``kubellm serve``'s main process: starts the core and the API servers,
watches them), ``frontend`` (one API server process), ``app`` (the FastAPI app of one),
``config`` (ServerConfig), ``body_limit`` (413 / 415 before a body is read),
``json_body`` (parsing with bounds), ``protocol`` (request bodies -> SamplingParams),
``generation`` (parse, template and tokenize off the event loop; admit; collect),
``errors`` (OpenAI error shape), ``routes_*`` (endpoints), ``streaming`` (SSE chunks),
``fast_json`` (orjson out), ``metrics`` (Prometheus, multiprocess-aware), ``lifecycle``
(uvicorn + SIGTERM drain), ``admission`` (API key, draining, queue bound),
``async_engine`` (the engine in a thread of this process: the benchmark's in-process
comparison).

May import: ``engine_core``, ``engine``, ``core`` and ``config*``. Nothing below
``engine`` reaches the server.
"""
