"""Security contexts shared by every pod the operator builds for an LLMDeployment."""
from __future__ import annotations

RUNTIME_UID = 1000  # the image's non-root user (Dockerfile)

CONTAINER_SECURITY = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                      "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]}}
# fsGroup: volumes (the model cache claim among them) are group-owned by the runtime's uid.
POD_SECURITY = {"runAsNonRoot": True, "runAsUser": RUNTIME_UID, "runAsGroup": RUNTIME_UID,
                "fsGroup": RUNTIME_UID, "seccompProfile": {"type": "RuntimeDefault"}}
