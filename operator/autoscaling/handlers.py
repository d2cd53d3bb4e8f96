"""Kopf handlers of the autoscaler; the operator entry point imports this module.

Only declarations: the work is in ``controller.autoscale``. One timer per LLMDeployment
ticks every KUBELLM_AUTOSCALER_TICK_SECONDS (default 1s, read at import) and acts when
the object's own spec.autoscaling.scrapeIntervalSeconds has passed.
"""
import logging
import os

import kopf

from kubellm.operator.autoscaling import controller
from kubellm.operator.autoscaling.api import GROUP, PLURAL, VERSION

TICK_SECONDS = float(os.environ.get("KUBELLM_AUTOSCALER_TICK_SECONDS", "1"))


class _QuietTicks(logging.Filter):
    """Drop Kopf's per-tick success line: the timer ticks far more often than it acts
    (its own decisions are logged and posted as Events)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != "Timer 'autoscaler' succeeded."


logging.getLogger("kopf.objects").addFilter(_QuietTicks())


def _post_event(body, type_: str, reason: str, message: str) -> None:
    kopf.event(body, type=type_, reason=reason, message=message)


@kopf.timer(GROUP, VERSION, PLURAL, id="autoscaler", interval=TICK_SECONDS,
            backoff=max(5 * TICK_SECONDS, 1.0))
async def autoscaler(name, namespace, uid, spec, status, body, memo, logger, **_):
    fragment: dict = {}
    await controller.autoscale(name=name, namespace=namespace, uid=uid, spec=spec,
                               status=status, body=body, memo=memo,
                               patch_status=fragment, post_event=_post_event,
                               logger=logger)
    await controller.write_status(namespace, name, fragment)
