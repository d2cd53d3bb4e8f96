"""The ClusterIP Service in front of the pods that serve HTTP (stage 0 of each replica)."""
from __future__ import annotations

from typing import Any

from kubellm.operator.builders.meta import child_metadata
from kubellm.operator.builders.pod import HTTP_PORT_NAME


def endpoint_url(cr: dict[str, Any], spec: dict[str, Any]) -> str:
    meta = cr["metadata"]
    return f"http://{meta['name']}.{meta['namespace']}.svc:{spec['service']['port']}/v1"


def build_service(cr: dict[str, Any], spec: dict[str, Any],
                  selector: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": child_metadata(cr, cr["metadata"]["name"]),
        "spec": {"type": spec["service"]["type"], "selector": selector,
                 "ports": [{"name": "http", "port": spec["service"]["port"],
                            "targetPort": HTTP_PORT_NAME, "protocol": "TCP"}]},
    }
