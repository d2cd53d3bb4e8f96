"""Images of the pods that are not model servers, unless the operator is told others."""
from __future__ import annotations

from kubellm.operator.version import __version__

# The Gateway API Inference Extension's Endpoint Picker, pinned to a release that reads
# vLLM's metric names by default and takes the flags routing.py passes.
DEFAULT_EPP_IMAGE = "registry.k8s.io/gateway-api-inference-extension/epp:v1.4.0"
# The activator runs from the operator's own image (`kubellm-activator`).
DEFAULT_ACTIVATOR_IMAGE = f"ghcr.io/kubellm/kubellm-operator:{__version__}"
