"""The OpenAI-compatible HTTP server: FastAPI app over an asyncio wrapper of the engine.

``config`` (ServerConfig), ``async_engine`` (engine loop in its own thread),
``protocol*`` (request bodies -> SamplingParams; ``structured_request`` for the
output-format fields), ``prompts`` (tokenization, chat templates, length checks),
``generation`` (admission of one or many prompts, waiting for results),
``completions`` / ``chat_completions`` (response bodies and stream chunks, with
``logprobs_format``), ``tool_choice`` and ``tool_parsers/`` (tool calls), ``errors``
(OpenAI error shape), ``routes_*`` (endpoints), ``streaming`` (SSE), ``metrics``
(Prometheus, vLLM's names), ``lifecycle`` (uvicorn + SIGTERM drain), ``app`` (wires them
together).

May import: ``engine``, ``core`` and ``config*``. Nothing below ``engine`` reaches
the server.
"""
