"""Queue-depth autoscaling of LLMDeployment replicas (issue 6).

Pure parts, unit-tested without a cluster: ``config`` (spec.autoscaling parsed and
validated), ``history`` (the metric window kept on the object), ``policy`` (window ->
decision), ``keda`` (the ScaledObject builder), ``status`` (the status patch).
Effectful parts: ``metrics`` (scrape the pods' /metrics), ``api`` (the Kubernetes
calls), ``controller`` (one autoscaling pass), ``handlers`` (the Kopf timer).
``simulate`` drives the policy against a simulated fleet.
"""
