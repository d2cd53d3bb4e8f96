"""The activator: what holds requests while an LLMDeployment scaled to zero starts.

One small pod per LLMDeployment with ``spec.autoscaling.minReplicas: 0`` (operator mode),
run from the operator's image as ``kubellm-activator``. While no replica is ready the
operator points the LLMDeployment's Service (and InferencePool) at it; it holds each
request, shows the held ones as ``vllm:num_requests_waiting`` on its /metrics (the
autoscaler scrapes it and scales from zero), and forwards them, streamed, to a replica as
soon as one is ready (it finds them through the DNS of a headless Service of the ready
serving pods). Then the operator points the Service back at the replicas: in steady state
requests never pass through it.

upstream.py  the ready replicas' addresses from DNS, and a wait for the first one
proxy.py     the aiohttp app: hold, forward (streaming), errors in OpenAI's shape, metrics
cli.py       ``kubellm-activator``

May import: aiohttp, prometheus-client, the standard library. Nothing else of the operator
(it runs with no API access: no service-account token).
"""
