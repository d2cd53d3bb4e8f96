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

from kubellm.operator import apply, status, status_writer
from kubellm.operator.builders.children import (Topology, build_children, serving_selector,
                                                topology)
from kubellm.operator.builders.network_policy import NetworkPolicyDefaults
from kubellm.operator.builders.pod import served_model_name
from kubellm.operator.builders.service import endpoint_url
from kubellm.operator.events import post_event
from kubellm.operator.kube import ApiError, KubeClient
from kubellm.operator.resources import manifest_path
from kubellm.operator.ownership import NameConflict
from kubellm.operator.validation import SpecError, defaulted_spec

LWS_CHECK_SECONDS = 60.0  # how long the "is LeaderWorkerSet installed" answer is reused
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "LeaderWorkerSet")


@dataclass
class Reconciler:
    client: KubeClient
    default_image: str
    network_policy: NetworkPolicyDefaults = field(default_factory=NetworkPolicyDefaults)
    logger: logging.Logger = field(default_factory=lambda: logging.getLogger("kubellm"))
    _locks: dict[tuple[str, str], asyncio.Lock] = field(default_factory=dict)
    _lws: tuple[float, bool] = (0.0, False)

    def lock(self, namespace: str, name: str) -> asyncio.Lock:
        """One pass at a time per LLMDeployment (handlers, timer and child events race)."""
        return self._locks.setdefault((namespace, name), asyncio.Lock())

    async def lws_available(self) -> bool:
        checked_at, available = self._lws
        if time.monotonic() - checked_at > LWS_CHECK_SECONDS:
            available = await self.client.has_api(*apply.LWS_KIND)
            self._lws = (time.monotonic(), available)
        return available

    async def child_kinds(self) -> tuple[tuple[str, str], ...]:
        return apply.CHILD_KINDS + ((apply.LWS_KIND,) if await self.lws_available() else ())

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
            desired = build_children(cr, spec, image=self.default_image,
                                     lws_available=topo is Topology.LEADER_WORKER_SET,
                                     network_policy=self.network_policy)
        except SpecError as e:
            await self._degrade(cr, "InvalidSpec", str(e))
            return
        conflicts: list[NameConflict] = []
        try:
            for child in desired:
                try:
                    outcome = await apply.ensure_child(self.client, child)
                except NameConflict as e:
                    conflicts.append(e)
                    continue
                if outcome != "unchanged":
                    self.logger.info("%s: %s %s/%s", _ref(cr), outcome, child["kind"],
                                     child["metadata"]["name"])
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
        workloads = [await self.client.get(manifest_path(c)) for c in desired
                     if c["kind"] in WORKLOAD_KINDS]
        observed = status.observe(topo, spec, [w for w in workloads if w])
        selector = ",".join(f"{k}={v}" for k, v in
                            sorted(serving_selector(meta_name(cr), topo).items()))
        mine = status.healthy_status(cr, spec, observed, selector=selector,
                                     endpoint=endpoint_url(cr, spec),
                                     model=served_model_name(spec, meta_name(cr)))
        await self._write_status(cr, mine)

    async def _degrade(self, cr: dict[str, Any], reason: str, message: str) -> None:
        self.logger.warning("%s: %s: %s", _ref(cr), reason, message)
        before = await self._write_status(cr, status.degraded_status(cr, reason, message))
        previous = status.condition(before, "Degraded") or {}
        if previous.get("status") != "True" or previous.get("message") != message:
            try:
                await post_event(self.client, cr, "Warning", reason, message)
            except ApiError as e:  # the condition already says it; the Event is a courtesy
                self.logger.warning("could not post an Event: %s", e)

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
            for child in await apply.owned_children(self.client, cr, await self.child_kinds()):
                if await self.client.delete(manifest_path(child)):
                    self.logger.info("%s: deleted %s/%s", _ref(cr), child["kind"],
                                     child["metadata"]["name"])
        self._locks.pop((meta["namespace"], meta["name"]), None)


def meta_name(cr: dict[str, Any]) -> str:
    return cr["metadata"]["name"]


def _ref(cr: dict[str, Any]) -> str:
    """How log lines name an LLMDeployment: llmd/<namespace>/<name>."""
    return f"llmd/{cr['metadata']['namespace']}/{cr['metadata']['name']}"
