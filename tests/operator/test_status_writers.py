"""The reconciler and the autoscaler writing status through status_writer, interleaved
against the emulator, on the operator's one API client.

Both write ``status.conditions`` (a list a merge patch replaces whole): the operator its
Ready/Progressing/Degraded, the autoscaler its ScalingActive. Each round runs both
writers at once, the autoscaler's fragment computed from a stale copy of the object (as
a Kopf timer's body can be); after every round both latest conditions must be there.
"""
from __future__ import annotations

import asyncio
from typing import Any

import kopf

from kubellm.operator.autoscaling import controller, status as autoscaling_status
from kubellm.operator.kube import KubeClient
from kubellm.operator.reconcile import Reconciler

from .emulator import LLMD, live
from .test_operator_emulated import HF_SPEC, NS, llmd_path, manifest, request

ROUNDS = 12
SCALING_REASONS = ("ScaledUp", "MetricsUnavailable", "WithinTarget")


def operator_status(ready: bool, round_: int) -> dict[str, Any]:
    """What Reconciler writes: its own fields and conditions, nothing of the autoscaler's."""
    return {"phase": "Ready" if ready else "Progressing", "observedGeneration": 1,
            "conditions": [
                {"type": "Ready", "status": str(ready), "reason": f"Round{round_}",
                 "message": f"round {round_}"},
                {"type": "Progressing", "status": str(not ready), "reason": "Rollout",
                 "message": "m"},
                {"type": "Degraded", "status": "False", "reason": "ReconcileSucceeded",
                 "message": "m"}]}


def condition(cluster: Any, type_: str) -> dict[str, Any]:
    conditions = ((live(cluster, LLMD, NS, "chat") or {}).get("status") or {}).get(
        "conditions") or []
    return next((c for c in conditions if c["type"] == type_), {})


async def test_interleaved_writers_never_lose_the_others_condition(cluster):
    await request(cluster, "POST", llmd_path(), manifest("chat", HF_SPEC))
    cr = live(cluster, LLMD, NS, "chat")
    stale_status: dict[str, Any] = {}  # the body the autoscaler's timer saw: no conditions
    server = str(cluster.url).rstrip("/")
    client = KubeClient(kopf.ConnectionInfo(server=server, token="t"))
    reconciler = Reconciler(client, "kubellm:test")
    try:
        for round_ in range(ROUNDS):
            ready = round_ % 2 == 0
            reason = SCALING_REASONS[round_ % len(SCALING_REASONS)]
            fragment = autoscaling_status.condition_patch(
                stale_status, reason, f"round {round_}", now=1000.0 + round_)
            writers = [reconciler._write_status(cr, operator_status(ready, round_)),
                       controller.write_status(client, NS, "chat", fragment)]
            await asyncio.gather(*(writers if round_ % 2 else writers[::-1]))
            assert condition(cluster, "Ready")["reason"] == f"Round{round_}", round_
            assert condition(cluster, "Ready")["status"] == str(ready)
            scaling = condition(cluster, "ScalingActive")
            assert (scaling["reason"], scaling["message"]) == (reason, f"round {round_}")
    finally:
        await client.close()
    # The writers really raced: some writes were refused as stale and redone.
    assert cluster.conflicts > 0
