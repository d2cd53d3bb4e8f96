"""Tensor- and pipeline-parallel execution over torch.distributed.

The driver (rank 0, the engine's process) schedules and samples; executor.py sends each
step's work (step_work.py) to the workers (worker.py), which the launcher starts
(launcher.py) and joins through the rendezvous env (rendezvous.py). Every rank runs its
pipeline stage (pipeline.py) of the model part it loaded (stage.py), placed by layout.py.
comm_timing.py times the collectives per step when KUBELLM_COMM_TIMING asks (benchmarks).
"""
