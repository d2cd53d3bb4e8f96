"""kubellm.operator: the Kopf operator that turns LLMDeployments into pods.

resources.py          group/version/kind/plural of everything it touches, and API paths
schema.py, rules.py   the CRD's fields, defaults and cross-field rules (one source)
crd.py                the CustomResourceDefinition built from them (crds/, the chart)
validation.py         defaults + validation of a spec, as the API server would
builders/             pure functions: defaulted spec -> child manifests
kube.py               the one API client (kubernetes_asyncio on Kopf's login)
apply.py, ownership   idempotent create-or-patch, drift, pruning; never another's object
status.py, events.py  status from the children; Kubernetes Events
serving_status.py     the Routing condition, status.routing and status.coldStart
status_writer.py      the one way .status is written (shared with the autoscaler)
cache_loader.py       the model cache at run time: claim, loader Jobs, ModelCached
reconcile.py          one idempotent pass: spec -> children -> status
handlers.py, cli.py   Kopf handlers (thin) and `kubellm-operator`
rendezvous.py         env names of the multi-node rendezvous (the runtime spells them too;
                      tests/contract keeps the two in step)
autoscaling/          queue-depth autoscaler (its timer registered by handlers.py)
activator/            `kubellm-activator`: holds requests while a scaled-to-zero model
                      starts (its own process and pod; imports nothing else of the operator)

May import: Kopf, kubernetes_asyncio, PyYAML, jsonschema, prometheus-client, aiohttp. Never the
runtime, the kernels or torch (tests/test_architecture.py).
"""
