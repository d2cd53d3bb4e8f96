"""kubellm.runtime.parallel: this process's place in a tensor/pipeline-parallel layout —
its ranks and process groups (``state``) and the timing of its collectives
(``comm_timing``). The bottom of the runtime: layers, models and the distributed engine
all read it; it imports only torch and ``config_sources``.
"""
