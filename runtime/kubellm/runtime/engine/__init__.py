"""kubellm.runtime.engine: the engine loop and its assembly — ``LLMEngine`` (add_request /
step), the offline ``LLM`` API, and ``builder`` (a config -> an engine, single-process or
distributed; ``parts`` holds what both assemblies share).

May import: every runtime subpackage but ``server`` and ``cli``.
"""
