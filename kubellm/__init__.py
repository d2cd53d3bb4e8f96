"""kubellm: LLM serving on Kubernetes.

Subpackages: ``kubellm.runtime`` (inference engine and server), ``kubellm.operator``
(the Kopf operator) and ``kubellm.kernels`` (Triton kernels).
"""
__version__ = "0.1.0"
