"""The OpenAI-compatible HTTP server: API server processes in front of the engine core.

``supervisor`` (``kubellm serve``'s main process: starts the core and the API servers,
watches them), ``frontend`` (one API server process), ``app`` (the FastAPI app of one),
``config`` (ServerConfig), ``body_limit`` (413 / 415 before a body is read),
``json_body`` (parsing with bounds), ``protocol*`` (request bodies -> SamplingParams;
``structured_request`` for the output-format fields), ``prompts`` (tokenization, chat
templates, length checks), ``generation`` (parse, template and tokenize off the event
loop; admit one or many prompts; collect), ``completions`` / ``chat_completions``
(response bodies and stream chunks, with ``logprobs_format``), ``tool_choice`` and
``tool_parsers/`` (tool calls), ``errors`` (OpenAI error shape), ``routes_*``
(endpoints), ``streaming`` (SSE), ``fast_json`` (orjson out), ``metrics`` (Prometheus,
vLLM's names, multiprocess-aware), ``lifecycle`` (uvicorn + SIGTERM drain),
``admission`` (API key, draining, queue bound), ``async_engine`` (the engine in a thread
of this process: the benchmark's in-process comparison).

May import: ``engine_core``, ``engine``, ``core`` and ``config*``. Nothing below
``engine`` reaches the server.
"""
