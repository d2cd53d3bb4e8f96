"""One reconcile pass of an LLMDeployment: spec -> children -> status.

Every pass is idempotent, so create, update, resume, the resync timer and child events
all call the same function; a pass after a restart finds the children and changes
nothing. A spec that cannot be acted on sets Degraded and posts an Event; it never
raises, so Kopf never retries it in a loop.
"""
from __future__ import annotations

import asyncio
import datetime
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from kubellm.operator import apply, cache_loader, serving_status, status, status_writer
from kubellm.operator.builders.activator import wants_activator
from kubellm.operator.builders.children import (Topology, build_children,
                                                checked_cache_plan, serving_selector,
                                                topology)
from kubellm.operator.builders.images import DEFAULT_ACTIVATOR_IMAGE, DEFAULT_EPP_IMAGE
from kubellm.operator.builders.meta import COMPONENT_LABEL, GROUP_LABEL, selector_labels
from kubellm.operator.builders.routing import epp_name, wants_routing
from kubellm.operator.builders.network_policy import NetworkPolicyDefaults
from kubellm.operator.builders.pod import served_model_name
from kubellm.operator.builders.service import endpoint_url
from kubellm.operator.events import post_event
from kubellm.operator.kube import ApiError, KubeClient
from kubellm.operator.resources import manifest_path, resource_path
from kubellm.operator.ownership import NameConflict
from kubellm.operator.validation import SpecError, defaulted_spec

API_CHECK_SECONDS = 60.0  # how long an "is this optional CRD installed" answer is reused
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "LeaderWorkerSet")


def is_serving(child: dict[str, Any]) -> bool:
    """A workload of model servers (not the activator's or the Endpoint Picker's)."""
    return child["kind"] in WORKLOAD_KINDS and \
        COMPONENT_LABEL not in child["metadata"].get("labels", {})


@dataclass
class Reconciler:
    client: KubeClient
    default_image: str
    network_policy: NetworkPolicyDefaults = field(default_factory=NetworkPolicyDefaults)
    cache_retry: cache_loader.RetryPolicy = field(default_factory=cache_loader.RetryPolicy)
    epp_image: str = DEFAULT_EPP_IMAGE
    activator_image: str = DEFAULT_ACTIVATOR_IMAGE
    logger: logging.Logger = field(default_factory=lambda: logging.getLogger("kubellm"))
    _locks: dict[tuple[str, str], asyncio.Lock] = field(default_factory=dict)
    _apis: dict[tuple[str, str], tuple[float, bool]] = field(default_factory=dict)

    def lock(self, namespace: str, name: str) -> asyncio.Lock:
        """One pass at a time per LLMDeployment (handlers, timer and child events race)."""
        return self._locks.setdefault((namespace, name), asyncio.Lock())

    async def _served(self, kind: tuple[str, str]) -> bool:
        checked_at, available = self._apis.get(kind, (-API_CHECK_SECONDS, False))
        if time.monotonic() - checked_at >= API_CHECK_SECONDS:
            available = await self.client.has_api(*kind)
            self._apis[kind] = (time.monotonic(), available)
        return available

    async def lws_available(self) -> bool:
        return await self._served(apply.LWS_KIND)

    async def pool_available(self) -> bool:
        return await self._served(apply.POOL_KIND)

    async def child_kinds(self) -> tuple[tuple[str, str], ...]:
        return (apply.CHILD_KINDS + apply.ROUTING_KINDS
                + ((apply.LWS_KIND,) if await self.lws_available() else ())
                + ((apply.POOL_KIND,) if await self.pool_available() else ()))

    async def reconcile(self, cr: dict[str, Any]) -> None:
        meta = cr["metadata"]
        async with self.lock(meta["namespace"], meta["name"]):
            # Events queue up behind the lock: act on the object as it is now, not as the
            # event saw it, or a pass queued before a deletion would re-create children.
            fresh = await self.client.get(manifest_path(cr))
            if fresh is None or fresh["metadata"].get("deletionTimestamp"):
                return
            await self._reconcile(fresh)

    async def _reconcile(self, cr: dict[str, Any]) -> None:
        try:
            spec = defaulted_spec(cr.get("spec"))
            topo = topology(spec, await self.lws_available())
            plan = checked_cache_plan(cr, spec, topo)
            pool = wants_routing(spec) and await self.pool_available()

            def build(route_to_activator: bool) -> list[dict[str, Any]]:
                return build_children(
                    cr, spec, image=self.default_image,
                    lws_available=topo is Topology.LEADER_WORKER_SET,
                    network_policy=self.network_policy, pool_available=pool,
                    route_to_activator=route_to_activator, epp_image=self.epp_image,
                    activator_image=self.activator_image)
            desired = build(False)
            # Scale from zero: while no replica is ready, the Service (and the pool) send
            # requests to the activator, which holds them.
            if wants_activator(spec) and (spec["replicas"] == 0 or
                                          (await self._observe(spec, topo, desired))
                                          .ready_replicas == 0):
                desired = build(True)
        except SpecError as e:
            await self._degrade(cr, "InvalidSpec", str(e))
            return
        conflicts: list[NameConflict] = []
        cache: cache_loader.CacheState | None = None
        try:
            if plan is not None:
                try:
                    cache = await cache_loader.ensure_cache(
                        self.client, cr, spec, plan, spec.get("image") or self.default_image,
                        self.cache_retry, _now())
                except NameConflict as e:
                    conflicts.append(e)
            else:
                for job in await cache_loader.delete_loader_jobs(self.client, cr):
                    self.logger.info("%s: deleted Job/%s", _ref(cr), job)
            for outcome, claim in await cache_loader.release_unwanted_claims(
                    self.client, cr, plan):
                self.logger.info("%s: %s PersistentVolumeClaim/%s", _ref(cr), outcome, claim)
            # Until the cache holds the model, no server starts: workloads that exist keep
            # running as they are (old revision), none is created.
            held = plan is not None and (cache is None or not cache.filled)
            applied = [c for c in desired if not (held and is_serving(c))]
            conflicts += await self._ensure(cr, applied, spec, topo)
            pruned = await apply.prune_children(self.client, cr, desired,
                                                await self.child_kinds())
            for kind, name in pruned:
                self.logger.info("%s: deleted %s/%s", _ref(cr), kind, name)
        except ApiError as e:
            if e.status >= 500 or e.status in (409, 429):
                raise  # transient: Kopf retries the handler with backoff
            await self._degrade(cr, "ApplyFailed", f"the API server rejected a child: {e}")
            return
        if conflicts:
            # Recovers by itself: the resync pass creates the child once the object is gone.
            await self._degrade(cr, "NameConflict", "; ".join(map(str, conflicts)))
            return
        await self._report(cr, spec, topo, desired, cache, pool)

    async def _observe(self, spec: dict[str, Any], topo: Topology,
                       desired: list[dict[str, Any]]) -> status.Observed:
        workloads = [await self.client.get(manifest_path(c)) for c in desired
                     if is_serving(c)]
        return status.observe(topo, spec, [w for w in workloads if w])

    async def _ensure(self, cr: dict[str, Any], children: list[dict[str, Any]],
                      spec: dict[str, Any], topo: Topology) -> list[NameConflict]:
        conflicts = []
        # StatefulSet groups of a multi-node replica are changed one group at a time: a
        # changed group restarts all its ranks, so two at once would be two replicas down.
        busy = await self._busy_groups(children, spec) if topo is Topology.STATEFUL_SETS \
            else set()
        for child in children:
            name = child["metadata"]["name"]
            if child["kind"] == "StatefulSet" and busy - {name}:
                live = await self.client.get(manifest_path(child))
                if live is not None and not apply.is_subset(child, live):
                    continue  # its turn comes when the others are rolled out and ready
            try:
                outcome = await apply.ensure_child(self.client, child)
            except NameConflict as e:
                conflicts.append(e)
                continue
            if outcome != "unchanged":
                self.logger.info("%s: %s %s/%s", _ref(cr), outcome, child["kind"], name)
                if child["kind"] == "StatefulSet":
                    busy.add(name)
        return conflicts

    async def _busy_groups(self, children: list[dict[str, Any]],
                           spec: dict[str, Any]) -> set[str]:
        size = spec["parallelism"]["pipeline"]
        busy = set()
        for child in children:
            if child["kind"] != "StatefulSet" or GROUP_LABEL not in child["metadata"]["labels"]:
                continue
            live = await self.client.get(manifest_path(child))
            if live is not None and not status.group_serving(live, size):
                busy.add(child["metadata"]["name"])
        return busy

    async def _report(self, cr: dict[str, Any], spec: dict[str, Any], topo: Topology,
                      desired: list[dict[str, Any]],
                      cache: cache_loader.CacheState | None, pool: bool) -> None:
        meta = cr["metadata"]
        observed = await self._observe(spec, topo, desired)
        unschedulable = None
        if not observed.rollout_done or observed.ready_replicas < spec["replicas"]:
            pods = await self.client.list(resource_path("v1", "Pod", meta["namespace"]),
                                          _selector(selector_labels(meta_name(cr))))
            unschedulable = status.unschedulable_message(
                [p for p in pods if _matches(p, selector_labels(meta_name(cr)))])
        selector = _selector(serving_selector(meta_name(cr), topo))
        mine = status.healthy_status(
            cr, spec, observed, selector=selector, endpoint=endpoint_url(cr, spec),
            model=served_model_name(spec, meta_name(cr)),
            extra_conditions=(cache.condition(),) if cache else (),
            waiting=("WaitingForModelCache", cache.message)
            if cache and not cache.filled else None,
            unschedulable=unschedulable)
        if cache and cache.degraded:
            mine = status.with_degraded(mine, "ModelCacheFailed"
                                        if cache.reason == "LoaderFailed" else cache.reason,
                                        cache.message)
        mine["routing"] = None  # merge patch: dropped unless routing is on
        if wants_routing(spec):
            epp = await self.client.get(resource_path(
                "apps/v1", "Deployment", meta["namespace"], epp_name(meta["name"])))
            condition, mine["routing"] = serving_status.routing(cr, pool, epp)
            mine["conditions"].append(condition)
        cold, seconds = serving_status.cold_start(cr.get("status") or {}, spec["replicas"],
                                                  observed.ready_replicas, _now())
        if cold is not None:
            mine["coldStart"] = cold
        before = await self._write_status(cr, mine)
        events = list(cache.events) if cache else []
        if seconds is not None:
            events.append(("Normal", "ColdStart", f"the first replica was Ready {seconds:.0f}s "
                                                  "after the scale from zero"))
        was_cached = status.condition(before, "ModelCached") or {}
        if cache and cache.filled and was_cached.get("status") != "True":
            events.append(("Normal", "ModelCached", cache.message))
        was_degraded = status.condition(before, "Degraded") or {}
        if cache and cache.degraded and was_degraded.get("message") != cache.message:
            events.append(("Warning", mine["conditions"][0]["reason"], cache.message))
        for type_, reason, message in events:
            await self._event(cr, type_, reason, message)

    async def _event(self, cr: dict[str, Any], type_: str, reason: str, message: str) -> None:
        try:
            await post_event(self.client, cr, type_, reason, message)
        except ApiError as e:  # the status already says it; the Event is a courtesy
            self.logger.warning("could not post an Event: %s", e)

    async def _degrade(self, cr: dict[str, Any], reason: str, message: str) -> None:
        self.logger.warning("%s: %s: %s", _ref(cr), reason, message)
        before = await self._write_status(cr, status.degraded_status(cr, reason, message))
        previous = status.condition(before, "Degraded") or {}
        if previous.get("status") != "True" or previous.get("message") != message:
            await self._event(cr, "Warning", reason, message)

    async def _write_status(self, cr: dict[str, Any], mine: dict[str, Any]) -> dict[str, Any]:
        """Merge-patch our status fields onto the freshest object; returns the old status."""
        meta = cr["metadata"]
        return await status_writer.write_status(
            self.client, meta["namespace"], meta["name"],
            lambda current: status.status_patch(
                current, mine, datetime.datetime.now(datetime.timezone.utc)))

    async def cleanup(self, cr: dict[str, Any]) -> None:
        """Delete every child of a deleted LLMDeployment (the garbage collector's job on a
        real cluster; done here too so that API servers without one end up clean)."""
        meta = cr["metadata"]
        async with self.lock(meta["namespace"], meta["name"]):
            # The claim first: a retained one must lose our reference before the garbage
            # collector sees the LLMDeployment gone.
            for outcome, claim in await cache_loader.release_unwanted_claims(
                    self.client, cr, None):
                self.logger.info("%s: %s PersistentVolumeClaim/%s", _ref(cr), outcome, claim)
            kinds = await self.child_kinds() + (("batch/v1", "Job"),)
            for child in await apply.owned_children(self.client, cr, kinds):
                if await self.client.delete(manifest_path(child)):
                    self.logger.info("%s: deleted %s/%s", _ref(cr), child["kind"],
                                     child["metadata"]["name"])
        self._locks.pop((meta["namespace"], meta["name"]), None)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _selector(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _matches(obj: dict[str, Any], labels: dict[str, str]) -> bool:
    """Filtered here too: an API server may ignore the label selector."""
    have = obj.get("metadata", {}).get("labels") or {}
    return all(have.get(k) == v for k, v in labels.items())


def meta_name(cr: dict[str, Any]) -> str:
    return cr["metadata"]["name"]


def _ref(cr: dict[str, Any]) -> str:
    """How log lines name an LLMDeployment: llmd/<namespace>/<name>."""
    return f"llmd/{cr['metadata']['namespace']}/{cr['metadata']['name']}"
