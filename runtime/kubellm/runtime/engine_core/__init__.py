"""The engine core in its own process, and the client the HTTP front ends talk to it with.

vLLM V1's split (EngineCore behind its API server processes): the scheduler, the model
runner and the sampler run in a process that does nothing else; front ends parse,
tokenize, detokenize and stream. They meet over ZeroMQ sockets carrying msgpack.

``wire`` (message encoding), ``output_delta`` (what changed in a RequestOutput since the
last step, and rebuilding it on the other side), ``core_proc`` (the core's loop),
``launch`` (starting it and waiting for its model to load), ``client`` (the front end's
asyncio side), ``assembler`` (detokenization and stop strings in the front end),
``streams`` (one request's stream of outputs, shared with the in-process engine).

May import: ``engine``, ``core`` and ``config*``. ``server`` imports this package.
"""
