"""Kopf handlers of the autoscaler, registered by ``register_autoscaler`` (called from
``handlers.register_handlers`` with the operator's config, like every other handler).

Only declarations: the work is in ``controller.autoscale``. One timer per LLMDeployment
ticks every ``tick_seconds`` and acts when the object's own
spec.autoscaling.scrapeIntervalSeconds has passed.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import kopf

from kubellm.operator.autoscaling import controller
from kubellm.operator.kube import KubeClient
from kubellm.operator.resources import GROUP, PLURAL, VERSION


class _QuietTicks(logging.Filter):
    """Drop Kopf's per-tick success line: the timer ticks far more often than it acts
    (its own decisions are logged and posted as Events)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != "Timer 'autoscaler' succeeded."


def _post_event(body: Any, type_: str, reason: str, message: str) -> None:
    kopf.event(body, type=type_, reason=reason, message=message)


def register_autoscaler(tick_seconds: float, client: Callable[[], KubeClient]) -> None:
    """``client`` returns the operator's API client (made at login)."""
    logging.getLogger("kopf.objects").addFilter(_QuietTicks())

    @kopf.timer(GROUP, VERSION, PLURAL, id="autoscaler", interval=tick_seconds,
                backoff=max(5 * tick_seconds, 1.0))
    async def autoscaler(name: str, namespace: str, uid: str, spec: Any, status: Any,
                         body: Any, memo: Any, logger: Any, **_: Any) -> None:
        fragment: dict = {}
        await controller.autoscale(client(), name=name, namespace=namespace, uid=uid,
                                   spec=spec, status=status, body=body, memo=memo,
                                   patch_status=fragment, post_event=_post_event,
                                   logger=logger)
        await controller.write_status(client(), namespace, name, fragment)
