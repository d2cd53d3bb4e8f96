"""kubellm.runtime.core: the scheduling core — requests, KV-block accounting, scheduling,
and turning sampled token ids into outputs. It never sees a tensor (token counts, block
ids and text only), so it is tested without a device.

May import: the standard library, ``kubellm.runtime.config*``, tokenizers (detokenizer).
Never: torch, ``worker``, ``models``, ``layers``, ``server``, ``distributed``.
"""
