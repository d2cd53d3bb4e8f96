"""Queue-depth autoscaling of LLMDeployment replicas.

Pure parts, unit-tested without a cluster: ``config`` (spec.autoscaling parsed and
validated), ``history`` (the metric window kept on the object), ``policy`` (window ->
decision), ``keda`` (the ScaledObject builder), ``status`` (the status patch).
Effectful parts: ``metrics`` (scrape the pods' /metrics), ``api`` (the Kubernetes
calls), ``controller`` (one autoscaling pass), ``handlers`` (the Kopf timer).
benchmarks/autoscaling/simulate.py drives the policy against a simulated fleet.

May import: the operator's own modules (kube, resources, ownership, status_writer).
"""
