"""kubellm.runtime.loading: where weights come from — checkpoint files and their tensors
(``loader``), quantized formats and their detection (``quantized``: GPTQ, AWQ,
compressed-tensors, GGUF), the embedded default model converted from its GGUF
(``default_model``), the hub files a model needs and ``kubellm download``'s fetch of them
(``hub``), and the file-permission rule for what the runtime writes for other processes.

May import: torch, safetensors, gguf, transformers, huggingface_hub, ``models`` (the
registry), ``layers`` (the quantized linears). Never: ``engine``, ``server``,
``distributed``.
"""
