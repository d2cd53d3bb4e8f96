"""kubellm.runtime.engine: the engine loop and its assembly — ``LLMEngine`` (add_request /
step, with ``request_checks``), its ``lifecycle`` (shutdown, a dead engine), the offline
``LLM`` API (generate, chat), ``chat`` (chat templates, shared with the server),
``generation_defaults`` (generation_config.json), and ``builder`` (a config -> an engine,
single-process or distributed).

May import: every runtime subpackage but ``server`` and ``cli``.
"""
