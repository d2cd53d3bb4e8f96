"""kubellm.runtime.attention: attention over the paged KV cache. A backend takes flat
varlen inputs and the per-step metadata (``metadata``); ``torch`` runs anywhere,
``triton`` (kubellm.kernels) on CUDA.

May import: torch, ``kubellm.kernels``. Used by ``layers``, ``worker`` and ``distributed``.
"""
