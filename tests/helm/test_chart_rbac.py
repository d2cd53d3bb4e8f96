"""The chart's RBAC: exactly what the operator and the autoscaler call, bound cluster-wide
by default and only in the watched namespaces with operator.watchNamespaces."""
from __future__ import annotations

from .test_chart import by_kind, render

# (apiGroup, resource) -> verbs of the workloads ClusterRole. Equality, not inclusion:
# a broader grant has to be added here on purpose.
WORKLOAD_GRANTS = {
    ("kubellm.io", "llmdeployments"): {"get", "list", "watch", "patch"},
    ("kubellm.io", "llmdeployments/status"): {"patch"},
    ("kubellm.io", "llmdeployments/scale"): {"get", "patch"},
    ("apps", "deployments"): {"get", "list", "watch", "create", "patch", "delete"},
    ("apps", "statefulsets"): {"get", "list", "watch", "create", "patch", "delete"},
    ("", "services"): {"get", "list", "watch", "create", "patch", "delete"},
    ("networking.k8s.io", "networkpolicies"): {"get", "list", "watch", "create", "patch",
                                               "delete"},
    ("policy", "poddisruptionbudgets"): {"get", "list", "watch", "create", "patch",
                                         "delete"},
    ("", "persistentvolumeclaims"): {"get", "list", "create", "patch", "delete"},
    ("batch", "jobs"): {"get", "list", "watch", "create", "delete"},
    ("leaderworkerset.x-k8s.io", "leaderworkersets"): {"get", "list", "create", "patch",
                                                       "delete"},
    ("", "pods"): {"get", "list", "watch"},
    ("keda.sh", "scaledobjects"): {"get", "create", "patch", "delete"},
    ("http.keda.sh", "httpscaledobjects"): {"get", "create", "patch", "delete"},
    ("inference.networking.k8s.io", "inferencepools"): {"get", "list", "watch", "create",
                                                        "patch", "delete"},
    ("", "configmaps"): {"get", "list", "create", "patch", "delete"},
    ("", "serviceaccounts"): {"get", "list", "create", "patch", "delete"},
    ("rbac.authorization.k8s.io", "roles"): {"get", "list", "create", "patch", "delete"},
    ("rbac.authorization.k8s.io", "rolebindings"): {"get", "list", "create", "patch",
                                                    "delete"},
    ("inference.networking.x-k8s.io", "inferenceobjectives"): {"get", "list", "watch"},
    ("inference.networking.x-k8s.io", "inferencemodelrewrites"): {"get", "list", "watch"},
    ("", "events"): {"create"},
}
DISCOVERY_GRANTS = {
    ("apiextensions.k8s.io", "customresourcedefinitions"): {"get", "list", "watch"},
    ("", "namespaces"): {"get", "list", "watch"},
}


def grants(role: dict) -> dict[tuple[str, str], set[str]]:
    found: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        assert set(rule) == {"apiGroups", "resources", "verbs"}, rule  # no resourceNames etc.
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                found.setdefault((group, resource), set()).update(rule["verbs"])
    return found


def roles(docs: list[dict]) -> dict[str, dict]:
    return {r["metadata"]["name"]: r for r in by_kind(docs, "ClusterRole")}


def test_cluster_wide_install_grants_exactly_what_is_called(tmp_path):
    docs = render(tmp_path)
    found = roles(docs)
    assert set(found) == {"rel-kubellm-discovery", "rel-kubellm-workloads"}
    assert grants(found["rel-kubellm-workloads"]) == WORKLOAD_GRANTS
    assert grants(found["rel-kubellm-discovery"]) == DISCOVERY_GRANTS
    assert by_kind(docs, "Role") == [] and by_kind(docs, "RoleBinding") == []
    bound = {b["roleRef"]["name"]: b["subjects"] for b in by_kind(docs, "ClusterRoleBinding")}
    assert set(bound) == set(found)
    for subjects in bound.values():
        assert subjects == [{"kind": "ServiceAccount", "name": "rel-kubellm",
                             "namespace": "kubellm-system"}]


def test_per_namespace_install_binds_the_workloads_role_only_there(tmp_path):
    docs = render(tmp_path, {"operator": {"watchNamespaces": ["team-a", "team-b"]}})
    found = roles(docs)
    assert grants(found["rel-kubellm-workloads"]) == WORKLOAD_GRANTS
    cluster_bound = {b["roleRef"]["name"] for b in by_kind(docs, "ClusterRoleBinding")}
    assert cluster_bound == {"rel-kubellm-discovery"}
    bindings = by_kind(docs, "RoleBinding")
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    assert {b["roleRef"]["name"] for b in bindings} == {"rel-kubellm-workloads"}


def test_the_operator_holds_everything_the_endpoint_pickers_role_grants(tmp_path):
    """RBAC refuses a Role that grants more than its creator holds (no `escalate`)."""
    from kubellm.operator.builders.routing import EPP_RULES

    held = grants(roles(render(tmp_path))["rel-kubellm-workloads"])
    for rule in EPP_RULES:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                assert set(rule["verbs"]) <= held.get((group, resource), set()), resource


def test_no_wildcards_and_no_escalation(tmp_path):
    for role in by_kind(render(tmp_path), "ClusterRole"):
        for (group, resource), verbs in grants(role).items():
            assert "*" not in {group, resource} | verbs, (group, resource, verbs)
            assert not verbs & {"update", "escalate", "bind", "impersonate",
                                "deletecollection"}, (group, resource, verbs)
            assert resource != "secrets", "the operator never reads Secrets"
