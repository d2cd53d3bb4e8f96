"""kubellm.operator: the Kopf operator that turns LLMDeployments into GPU pods.

schema.py, rules.py   the CRD's fields, defaults and cross-field rules (one source)
crd.py                the CustomResourceDefinition built from them (crds/, the chart)
validation.py         defaults + validation of a spec, as the API server would
builders/             pure functions: defaulted spec -> child manifests
kube.py, apply.py     async API client; idempotent create-or-patch, drift, pruning
status.py, events.py  status from the children; Kubernetes Events
reconcile.py          one idempotent pass: spec -> children -> status
handlers.py, cli.py   Kopf handlers (thin) and `kubellm operator`
rendezvous.py         env names of the multi-node rendezvous (shared with the runtime)
autoscaling/          queue-depth autoscaler (its own handlers, imported by cli.py)
"""
