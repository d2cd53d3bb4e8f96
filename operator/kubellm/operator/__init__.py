"""kubellm.operator: the Kopf operator that turns LLMDeployments into pods.

resources.py          group/version/kind/plural of everything it touches, and API paths
schema.py, rules.py   the CRD's fields, defaults and cross-field rules (one source)
crd.py                the CustomResourceDefinition built from them (crds/, the chart)
validation.py         defaults + validation of a spec, as the API server would
builders/             pure functions: defaulted spec -> child manifests
kube.py               the one API client (kubernetes_asyncio on Kopf's login)
apply.py, ownership   idempotent create-or-patch, drift, pruning; never another's object
status.py, events.py  status from the children; Kubernetes Events
status_writer.py      the one way .status is written (shared with the autoscaler)
reconcile.py          one idempotent pass: spec -> children -> status
handlers.py, cli.py   Kopf handlers (thin) and `kubellm-operator`
rendezvous.py         env names of the multi-node rendezvous (the runtime spells them too;
                      tests/contract keeps the two in step)
autoscaling/          queue-depth autoscaler (its timer registered by handlers.py)

May import: Kopf, kubernetes_asyncio, PyYAML, jsonschema, prometheus-client. Never the
runtime, the kernels or torch (tests/test_architecture.py).
"""
