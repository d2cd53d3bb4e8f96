"""The loader Job's verdict on each pass, whatever the moment the operator first sees it."""
from __future__ import annotations

import datetime

from kubellm.operator.builders import model_cache as mc
from kubellm.operator.cache_loader import RetryPolicy, _judge

PLAN = mc.CachePlan(claim_name="chat-model-cache", owned=True, repo="org/model",
                    revision=None, key="k", access_mode="ReadWriteOnce",
                    when_deleted="Delete")
FAILED_AT = datetime.datetime(2026, 12, 1, 12, 0, 0, tzinfo=datetime.timezone.utc)


def _failed_job(attempt: int) -> dict:
    return {"metadata": {"name": f"chat-loader-{attempt}",
                         "labels": {mc.ATTEMPT_LABEL: str(attempt)}},
            "status": {"failed": 4, "conditions": [
                {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                 "lastTransitionTime": "2026-12-01T12:00:00Z"}]}}


def _at(seconds: float) -> datetime.datetime:
    return FAILED_AT + datetime.timedelta(seconds=seconds)


def test_a_failure_first_seen_after_its_retry_is_due_is_still_reported():
    retry = RetryPolicy(base_seconds=10)
    waiting, create = _judge(_failed_job(1), PLAN, retry, _at(5))
    assert create == 0 and waiting.degraded and waiting.reason == "LoaderFailed"
    assert "attempt 2 is due at 2026-12-01T12:00:10Z" in waiting.message
    due, create = _judge(_failed_job(1), PLAN, retry, _at(500))
    # The same verdict and message (no second Warning when a pass saw it before), and
    # the next attempt is created in the same pass.
    assert create == 2 and due.degraded and due.message == waiting.message


def test_the_backoff_doubles_per_attempt_up_to_the_ceiling():
    retry = RetryPolicy(base_seconds=10, ceiling_seconds=35)
    assert [_judge(_failed_job(a), PLAN, retry, _at(d - 1))[1] for a, d in
            ((1, 10), (2, 20), (3, 35), (4, 35))] == [0, 0, 0, 0]
    assert [_judge(_failed_job(a), PLAN, retry, _at(d))[1] for a, d in
            ((1, 10), (2, 20), (3, 35), (4, 35))] == [2, 3, 4, 5]
