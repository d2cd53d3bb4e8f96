"""A container's environment as the kubelet resolves it (for contract tests)."""
from __future__ import annotations

import re


def pod_env(container: dict, labels: dict, injected: dict) -> dict[str, str]:
    """What the container sees: literal values with $(VAR) expanded, label fieldRefs."""
    env = dict(injected)
    for var in container["env"]:
        if "value" in var:
            env[var["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env.get(m[1], m[0]),
                                      var["value"])
            continue
        path = var["valueFrom"].get("fieldRef", {}).get("fieldPath", "")
        label = re.fullmatch(r"metadata\.labels\['(.+)'\]", path)
        if label:
            env[var["name"]] = labels[label[1]]
    return env
