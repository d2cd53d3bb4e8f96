"""Scrape the queue depth from the serving pods' /metrics.

A pod is asked at http://<podIP>:<first container port>/metrics with a short timeout.
A pod that times out, refuses, answers non-200, or answers without the gauges is
*unknown* (None), never zero: a pod too busy to answer is the last one to count as idle.
"""
from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from kubellm.operator.autoscaling.history import Sample

WAITING = "vllm:num_requests_waiting"
RUNNING = "vllm:num_requests_running"
MAX_BODY_BYTES = 4 << 20   # a /metrics page larger than this is not our runtime's


@dataclasses.dataclass(frozen=True, slots=True)
class PodLoad:
    waiting: float
    running: float


def parse_load(text: str) -> PodLoad | None:
    """Sum every label variant (e.g. per model_name) of the two gauges; None if absent."""
    totals: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in (WAITING, RUNNING):
                    if not math.isfinite(sample.value) or sample.value < 0:
                        return None
                    totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    except (ValueError, TypeError, IndexError):   # what the parser raises on bad text
        return None
    if WAITING not in totals or RUNNING not in totals:
        return None
    return PodLoad(totals[WAITING], totals[RUNNING])


def metrics_url(pod: Mapping[str, Any]) -> str | None:
    """The /metrics URL of a ready, running, not terminating pod; None otherwise."""
    meta, spec, status = (pod.get(k) or {} for k in ("metadata", "spec", "status"))
    if meta.get("deletionTimestamp") or status.get("phase", "Running") != "Running":
        return None
    ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                for c in status.get("conditions") or ())
    containers = spec.get("containers") or [{}]
    ports = containers[0].get("ports") or [{}]
    ip, port = status.get("podIP"), ports[0].get("containerPort")
    if not (ready and ip and port):
        return None
    host = f"[{ip}]" if ":" in ip else ip   # IPv6 pod IPs
    return f"http://{host}:{port}/metrics"


async def scrape_pod(session: aiohttp.ClientSession, url: str,
                     timeout: float) -> PodLoad | None:
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout)) as response:
            if response.status != 200:
                return None
            body = await response.content.read(MAX_BODY_BYTES)
            return parse_load(body.decode("utf-8", errors="replace"))
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError):
        return None


async def scrape_fleet(urls: Iterable[str], timeout: float) -> list[PodLoad | None]:
    """Scrape all pods at once; one answer (or None) per URL, in order."""
    urls = list(urls)
    if not urls:
        return []
    # trust_env=False: pod IPs must never go through an HTTP proxy from the environment.
    async with aiohttp.ClientSession(trust_env=False) as session:
        return list(await asyncio.gather(*(scrape_pod(session, u, timeout) for u in urls)))


def to_sample(loads: Sequence[PodLoad | None], time: float, replicas: int,
              held: float | None = None) -> Sample:
    """``held``: what the activator holds (its waiting gauge), None without one."""
    answered = [load for load in loads if load is not None]
    saturated = [load.running for load in answered if load.waiting > 0]
    return Sample(time=time,
                  waiting=sum(load.waiting for load in answered),
                  running=sum(load.running for load in answered),
                  num_answered=len(answered), num_ready=len(loads), replicas=replicas,
                  saturated_running=sum(saturated) / len(saturated) if saturated else None,
                  held=held)
