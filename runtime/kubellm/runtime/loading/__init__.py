"""kubellm.runtime.loading: where weights come from — checkpoint files and their tensors
(``loader``), the embedded default model converted from its GGUF (``default_model``), and
the file-permission rule for what the runtime writes for other processes.

May import: torch, safetensors, transformers, ``models`` (the registry). Never: ``engine``,
``server``, ``distributed``.
"""
