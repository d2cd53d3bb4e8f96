"""Model building blocks; parallel linears and embeddings carry their own weight loaders.

May import: torch, ``kubellm.kernels``, ``parallel`` (ranks and groups of the current
process), ``attention``. Never: ``engine``, ``server``, ``worker``, ``distributed``.
"""
