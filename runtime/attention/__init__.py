"""Attention over the paged KV cache. A backend takes flat varlen inputs and the
per-step metadata below; ``torch`` runs anywhere, ``triton`` (kernels/) on CUDA."""
