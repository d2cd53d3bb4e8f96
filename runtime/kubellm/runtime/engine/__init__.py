"""kubellm.runtime.engine: the engine loop and its assembly — ``LLMEngine`` (add_request /
step), its ``lifecycle`` (shutdown, a dead engine), the offline ``LLM`` API, and
``builder`` (a config -> an engine, single-process or distributed).

May import: every runtime subpackage but ``server`` and ``cli``.
"""
