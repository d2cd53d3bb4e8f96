"""One autoscaling pass for one LLMDeployment: what the Kopf timer delegates to.

The timer ticks often (``handlers.TICK_SECONDS``); each pass does real work only when
the object's scrapeIntervalSeconds has passed since its last sample. The metric window
lives in the Kopf memo of the object while the operator runs and in status.autoscaler
across restarts (restored from there when the memo is empty).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

from kubellm.operator.autoscaling import api, keda, metrics, status as status_
from kubellm.operator.autoscaling.config import AutoscalingSpec, InvalidAutoscalingSpec
from kubellm.operator.autoscaling.history import MetricHistory
from kubellm.operator.autoscaling.http_addon import (HTTP_API_VERSION,
                                                     build_http_scaled_object,
                                                     uses_http_addon)
from kubellm.operator.autoscaling.policy import decide
from kubellm.operator.builders.meta import activator_labels
from kubellm.operator import status_writer
from kubellm.operator.kube import ApiError, KubeClient
from kubellm.operator.ownership import NameConflict

MEMO_KEY = "kubellm_autoscaler"
KEDA_REAPPLY_SECONDS = 60.0   # re-apply an unchanged ScaledObject this often (drift repair)
SCRAPE_TIMEOUT_SECONDS = 2.0

# (body, type, reason, message) -> None; kopf.event in the operator, a list in tests.
EventFn = Callable[[Any, str, str, str], None]


@dataclasses.dataclass
class Memory:
    """What one object's autoscaler remembers between passes."""
    history: MetricHistory
    last_scrape: float = float("-inf")
    keda_applied: dict | None = None
    keda_applied_at: float = float("-inf")
    http_applied: dict | None = None
    http_maybe_left: bool = True  # an HTTPScaledObject of ours may exist (unknown at start)


async def autoscale(client: KubeClient, *, name: str, namespace: str, uid: str,
                    spec: Mapping[str, Any],
                    status: Mapping[str, Any], body: Any, memo: MutableMapping[str, Any],
                    patch_status: MutableMapping[str, Any], post_event: EventFn,
                    logger: logging.Logger, now: float | None = None) -> None:
    now = time.time() if now is None else now
    memory = memo.get(MEMO_KEY)
    if memory is None:
        memory = memo[MEMO_KEY] = Memory(
            MetricHistory.from_status((status or {}).get("autoscaler")))

    def set_condition(reason: str, message: str, mode: str | None = None,
                      warn: bool = False) -> None:
        if status_.condition_reason(status) != reason:
            patch_status.update(status_.condition_patch(status, reason, message, now, mode))
            if warn:
                post_event(body, "Warning", reason, message)

    try:
        scaling = AutoscalingSpec.from_spec(spec)
    except InvalidAutoscalingSpec as e:
        set_condition("InvalidSpec", str(e), warn=True)
        return

    was_keda = ((status or {}).get("autoscaler") or {}).get("mode") == "keda"
    if was_keda and not (scaling.enabled and scaling.mode == "keda"):
        await api.delete_scaled_object(client, namespace, name, uid)
        await _drop_http_scaled_object(client, name, namespace, uid, memory, logger)
        memory.keda_applied = None
        patch_status["autoscaler"] = {"mode": None}   # merge patch: drop the key
        logger.info(f"Deleted KEDA ScaledObject {namespace}/{name}")

    if not scaling.enabled:
        set_condition("AutoscalingDisabled", "spec.autoscaling.enabled is false; "
                      "spec.replicas is left to the user")
        return

    if scaling.mode == "keda":
        try:
            await _apply_keda(client, name, namespace, uid, spec, memory, now, logger)
        except InvalidAutoscalingSpec as e:
            set_condition("InvalidSpec", str(e), warn=True)
            return
        except NameConflict as e:
            set_condition("NameConflict", str(e), warn=True)
            return
        except HttpAddonUnavailable:
            set_condition("KedaUnavailable", "the API server does not serve http.keda.sh/"
                          "v1alpha1 HTTPScaledObjects, which hold requests while a "
                          "minReplicas 0 LLMDeployment starts: install the KEDA HTTP add-on, "
                          "enable spec.routing, or set spec.autoscaling.mode: operator",
                          warn=True)
            return
        except ApiError as e:
            if e.status != 404:
                raise
            set_condition("KedaUnavailable", "the API server does not serve keda.sh/v1alpha1 "
                          "ScaledObjects: install KEDA or set spec.autoscaling.mode: "
                          "operator", warn=True)
            return
        message = f"KEDA ScaledObject {namespace}/{name} scales this LLMDeployment"
        if uses_http_addon(spec):
            message += ("; requests that wake it from zero go through the KEDA HTTP "
                        "add-on's interceptor (keda-add-ons-http-interceptor-proxy.keda:8080) "
                        f"with Host: {name}.{namespace}.svc")
        set_condition("KedaManaged", message, mode="keda")
        return

    if now - memory.last_scrape < scaling.scrape_interval_seconds - 1e-3:
        return
    memory.last_scrape = now
    await _scrape_and_scale(client, name, namespace, spec, status, body, scaling, memory,
                            patch_status, post_event, logger, now)


async def write_status(client: KubeClient, namespace: str, name: str,
                       fragment: Mapping[str, Any]) -> None:
    """Write what ``autoscale`` put in its ``patch_status`` onto the object as it is now
    (never through Kopf's patch of the event's body, whose conditions may be stale)."""
    if fragment:
        now = time.time()
        await status_writer.write_status(client, namespace, name,
                                         lambda fresh: status_.rebased(fragment, fresh, now))


def _labels(selector: str) -> dict[str, str]:
    """A status.selector string (k=v,k=v) as a dict; other operators are not ours."""
    return dict(part.split("=", 1) for part in selector.split(",") if "=" in part)


def _has(pod: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    have = (pod.get("metadata") or {}).get("labels") or {}
    return all(have.get(k) == v for k, v in labels.items())


async def _held_by_activator(client: KubeClient, name: str, namespace: str,
                             timeout: float) -> float | None:
    """Requests the activator pods hold (their waiting gauge); None if none answered."""
    labels = activator_labels(name)
    selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    pods = [p for p in await api.list_pods(client, namespace, selector) if _has(p, labels)]
    loads = await metrics.scrape_fleet(filter(None, map(metrics.metrics_url, pods)), timeout)
    answered = [load for load in loads if load is not None]
    return sum(load.waiting for load in answered) if answered else None


def capacity_key(spec: Mapping[str, Any]) -> str:
    """A digest of what decides how many requests one replica runs at once."""
    shape = {k: spec.get(k) for k in ("model", "parallelism", "engine", "resources")}
    return hashlib.sha256(json.dumps(shape, sort_keys=True, default=str).encode()).hexdigest()[:16]


class HttpAddonUnavailable(Exception):
    """minReplicas 0 in keda mode without routing, and no HTTPScaledObject kind served."""


async def _drop_http_scaled_object(client: KubeClient, name: str, namespace: str, uid: str,
                                   memory: Memory, logger: logging.Logger) -> None:
    if memory.http_applied is None and not memory.http_maybe_left:
        return
    if await api.delete_scaled_object(client, namespace, name, uid, HTTP_API_VERSION,
                                      "HTTPScaledObject"):
        logger.info(f"Deleted KEDA HTTPScaledObject {namespace}/{name}")
    memory.http_applied, memory.http_maybe_left = None, False


async def _apply_keda(client: KubeClient, name: str, namespace: str, uid: str,
                      spec: Mapping[str, Any], memory: Memory, now: float,
                      logger: logging.Logger) -> None:
    if uses_http_addon(spec):
        # First, so that the ScaledObject's push trigger names an existing object.
        wanted_http = build_http_scaled_object(name, namespace, spec, uid)
        if wanted_http != memory.http_applied or \
                now - memory.keda_applied_at >= KEDA_REAPPLY_SECONDS:
            try:
                await api.apply_scaled_object(client, wanted_http)
            except ApiError as e:
                if e.status == 404:
                    raise HttpAddonUnavailable() from None
                raise
            memory.http_applied, memory.http_maybe_left = wanted_http, True
    else:
        await _drop_http_scaled_object(client, name, namespace, uid, memory, logger)
    wanted = keda.build_scaled_object(name, namespace, spec, uid)
    if wanted != memory.keda_applied or now - memory.keda_applied_at >= KEDA_REAPPLY_SECONDS:
        await api.apply_scaled_object(client, wanted)
        if wanted != memory.keda_applied:
            logger.info(f"Applied KEDA ScaledObject {namespace}/{name}")
        memory.keda_applied, memory.keda_applied_at = wanted, now


async def _scrape_and_scale(client: KubeClient, name: str, namespace: str,
                            spec: Mapping[str, Any],
                            status: Mapping[str, Any], body: Any,
                            scaling: AutoscalingSpec, memory: Memory,
                            patch_status: MutableMapping[str, Any], post_event: EventFn,
                            logger: logging.Logger, now: float) -> None:
    # Read the scale subresource rather than the (possibly one event old) body: right
    # after we scaled, the body may not show it yet, and we must not scale twice.
    scale = await api.get_scale(client, namespace, name)
    current = int((scale.get("spec") or {}).get("replicas") or 0)
    selector = (scale.get("status") or {}).get("selector") or (status or {}).get("selector")
    if not selector:
        if status_.condition_reason(status) != "SelectorUnknown":
            patch_status.update(status_.condition_patch(
                status, "SelectorUnknown", "status.selector is not set yet; no pods to scrape",
                now))
        return

    # (Filtered here too: an API server may ignore the label selector, and the activator
    # of a scale from zero, scraped apart, must never count as a replica.)
    wanted = _labels(selector)
    pods = [p for p in await api.list_pods(client, namespace, selector) if _has(p, wanted)]
    urls = [url for url in map(metrics.metrics_url, pods) if url]
    timeout = min(SCRAPE_TIMEOUT_SECONDS, scaling.scrape_interval_seconds / 2)
    loads = await metrics.scrape_fleet(urls, timeout)
    held = await _held_by_activator(client, name, namespace, timeout) \
        if scaling.scales_to_zero else None
    memory.history = memory.history.for_capacity_key(capacity_key(spec)).record(
        metrics.to_sample(loads, now, current, held), scaling)

    last_scale = status_.parse_time((status or {}).get("lastScaleTime"))
    decision = decide(memory.history, scaling, current, last_scale, now)
    if decision.direction:
        await api.set_replicas(client, namespace, name, decision.replicas)
        logger.info(f"Autoscaler: {decision.reason}: {decision.message}")
        post_event(body, "Normal", decision.reason, decision.message)
    elif (decision.reason == "MetricsUnavailable"
          and status_.condition_reason(status) != decision.reason):
        post_event(body, "Warning", decision.reason, decision.message)
    patch_status.update(status_.decision_patch(status, decision, memory.history, now))
