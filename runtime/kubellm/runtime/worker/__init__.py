"""kubellm.runtime.worker: the device side of one process — flat step inputs staged on
the device, the model forward, sampling, CUDA graphs and KV-cache sizing.

May import: torch, ``kubellm.kernels``, ``core`` (the scheduler's step plan and request
parameters), ``attention``, ``layers``. Never: ``engine``, ``server``, ``distributed``.
"""
