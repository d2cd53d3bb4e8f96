"""keda mode, minReplicas 0, no routing: the KEDA HTTP add-on's HTTPScaledObject through
the autoscaler process against kmock (what test_scale_from_zero.py builds, here created,
refused, dropped and never taken over by a real operator)."""
import aiohttp

from kubellm.operator.autoscaling.http_addon import SKIP_SCALED_OBJECT

from .test_operator_kmock import (KEDA, LLMD, NS, cluster, condition,  # noqa: F401
                                  event_reasons, llmd, operator_process, wait_for)

HTTP = "http.keda.sh/v1alpha1/httpscaledobjects"
ADDON_API = "/apis/http.keda.sh/v1alpha1"
FROM_ZERO = {"enabled": True, "mode": "keda", "minReplicas": 0, "maxReplicas": 3,
             "scaleToZeroAfterSeconds": 120}
NO_ADDON = "noaddon"  # a namespace where the add-on's API answers 404
MERGE = {"Content-Type": "application/merge-patch+json"}


def serve(kmock, resource: str, kind: str) -> None:
    kmock.resources[resource] = kmock.ResourceInfo(kind=kind, namespaced=True)


def live(kmock, resource: str, name: str, namespace: str = NS):
    try:
        obj = kmock.objects[resource, namespace, name]
    except KeyError:
        return None
    return None if obj.deleted else obj


def push_triggers(kmock, name: str) -> list:
    scaled = live(kmock, KEDA, name)
    return [t for t in (scaled or {}).get("spec", {}).get("triggers", ())
            if t["type"] == "external-push"]


async def test_the_http_add_on_object_follows_min_replicas(cluster, tmp_path):
    """The HTTPScaledObject (owned, the add-on's own ScaledObject skipped) and the push
    trigger on our ScaledObject appear with minReplicas 0 and go with minReplicas 1; where
    the add-on is not installed (its API answers 404) the condition says what to do."""
    kmock = cluster
    serve(kmock, KEDA, "ScaledObject")
    serve(kmock, HTTP, "HTTPScaledObject")
    for call in (f"post {ADDON_API}/namespaces/{NO_ADDON}/httpscaledobjects",
                 f"get {ADDON_API}/namespaces/{NO_ADDON}/httpscaledobjects/other"):
        kmock[call] << 404
    kmock.objects[LLMD, NS, "llm"] = llmd("llm", FROM_ZERO, replicas=0)
    elsewhere = llmd("other", FROM_ZERO, replicas=0)
    elsewhere["metadata"]["namespace"] = NO_ADDON
    kmock.objects[LLMD, NO_ADDON, "other"] = elsewhere
    base = f"{kmock.url}/apis/kubellm.io/v1alpha1/namespaces/{NS}/llmdeployments"
    async with aiohttp.ClientSession() as client, operator_process(kmock, tmp_path):
        await wait_for(lambda: live(kmock, HTTP, "llm") and push_triggers(kmock, "llm")
                       and condition(kmock, "llm").get("reason") == "KedaManaged",
                       30, "the HTTPScaledObject and the push trigger", tmp_path)
        http = live(kmock, HTTP, "llm")
        assert http["metadata"]["annotations"][SKIP_SCALED_OBJECT] == "true"
        [owner] = http["metadata"]["ownerReferences"]
        assert owner["uid"] == "uid-llm" and owner["controller"] is True
        assert http["spec"]["replicas"]["min"] == 0
        assert "interceptor" in condition(kmock, "llm")["message"]
        await wait_for(lambda: condition(kmock, "other", NO_ADDON).get("reason")
                       == "KedaUnavailable", 30, "KedaUnavailable", tmp_path)
        assert "HTTPScaledObjects" in condition(kmock, "other", NO_ADDON)["message"]
        # Not a ScaledObject that nothing would wake from zero.
        assert live(kmock, KEDA, "other", NO_ADDON) is None

        async with client.patch(f"{base}/llm", headers=MERGE,
                                json={"spec": {"autoscaling": {"minReplicas": 1}}}) as r:
            assert r.status == 200
        await wait_for(lambda: live(kmock, HTTP, "llm") is None
                       and not push_triggers(kmock, "llm"), 30,
                       "the HTTPScaledObject and the push trigger gone", tmp_path)
    assert "KedaUnavailable" in event_reasons(kmock)


async def test_a_users_http_scaled_object_is_never_taken_over(cluster, tmp_path):
    kmock = cluster
    serve(kmock, KEDA, "ScaledObject")
    serve(kmock, HTTP, "HTTPScaledObject")
    theirs = {"apiVersion": "http.keda.sh/v1alpha1", "kind": "HTTPScaledObject",
              "metadata": {"name": "llm", "namespace": NS},
              "spec": {"hosts": ["web"], "scaleTargetRef": {"name": "web", "port": 80}}}
    kmock.objects[HTTP, NS, "llm"] = theirs
    kmock.objects[LLMD, NS, "llm"] = llmd("llm", FROM_ZERO, replicas=0)
    base = f"{kmock.url}/apis/kubellm.io/v1alpha1/namespaces/{NS}/llmdeployments"
    async with aiohttp.ClientSession() as client, operator_process(kmock, tmp_path):
        await wait_for(lambda: condition(kmock, "llm").get("reason") == "NameConflict",
                       20, "NameConflict", tmp_path)
        assert "HTTPScaledObject default/llm already exists" in \
            condition(kmock, "llm")["message"]
        # Not needed any more: still left alone.
        async with client.patch(f"{base}/llm", headers=MERGE,
                                json={"spec": {"autoscaling": {"minReplicas": 1}}}) as r:
            assert r.status == 200
        await wait_for(lambda: condition(kmock, "llm").get("reason") == "KedaManaged",
                       20, "KedaManaged", tmp_path)
    stored = kmock.objects[HTTP, NS, "llm"]
    assert not stored.deleted
    assert stored["spec"] == theirs["spec"] and "ownerReferences" not in stored["metadata"]
    assert not [r for r in kmock if r.method in ("PATCH", "DELETE")
                and r.url.path.endswith("/httpscaledobjects/llm")]
