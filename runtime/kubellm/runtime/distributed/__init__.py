"""Tensor- and pipeline-parallel execution over torch.distributed.

The driver (rank 0, the engine's process) schedules and samples; executor.py sends each
step's work (step_work.py) to the workers (worker.py), which the launcher starts
(launcher.py), ties to its own life (lifeline.py) and joins through the rendezvous env
(rendezvous.py). Every rank runs its pipeline stage (pipeline.py) of the model part it
loaded (stage.py), placed by layout.py, and answers the group's heartbeat (heartbeat.py);
driver.py assembles the engine on rank 0 and undoes a build that fails.
The ranks and groups of a process, and the timing of its collectives, live below
(``kubellm.runtime.parallel``), since the layers read them too.

May import: ``core``, ``worker``, ``loading``, ``parallel``, ``assembly``. Never:
``server`` or ``engine`` (whose builder imports this package to choose the distributed
assembly).
"""
