"""Unit tests of the pure scaling policy: bounds, rounding, windows, steps, unknown pods."""
import pytest

from kubellm.operator.autoscaling.config import AutoscalingSpec
from kubellm.operator.autoscaling.history import MetricHistory, Sample
from kubellm.operator.autoscaling.policy import decide

SPEC = AutoscalingSpec(enabled=True, min_replicas=1, max_replicas=10, target_queue_depth=8,
                       metrics_window_seconds=60, scrape_interval_seconds=15,
                       scale_up_stabilization_seconds=0,
                       scale_down_stabilization_seconds=300, max_scale_up_step=4)


def fleet(t, waiting, running=0, ready=1, answered=None, saturated=None, replicas=None):
    """A scrape of `ready` pods (all answering unless `answered`), `replicas` set."""
    answered = answered if answered is not None else ready
    replicas = replicas if replicas is not None else ready
    return Sample(t, waiting, running, answered, ready, replicas, saturated)


def history(*samples, capacity=None):
    h = MetricHistory(running_capacity=capacity)
    for s in samples:
        h = h.record(s, SPEC)
    return h


def steady(waiting, running=0, ready=2, until=600, every=15, **kw):
    """The same sample every scrape from t=0 to t=until."""
    return [fleet(t, waiting, running, ready, **kw) for t in range(0, until + 1, every)]


@pytest.mark.parametrize("waiting,expected", [
    (8, 1), (8 + 1e-12, 1), (9, 2), (16, 2), (17, 3), (24, 3), (0.5, 1)])
def test_rounding_is_ceil_of_waiting_over_target(waiting, expected):
    # A fresh fleet of 1 with a queue asks for ceil(waiting / 8); min is 1 anyway.
    d = decide(history(fleet(0, waiting)), SPEC, 1, None, 0)
    assert d.recommended == expected
    assert d.replicas == expected


def test_scale_up_is_immediate_and_step_limited():
    d = decide(history(fleet(0, 200, ready=2)), SPEC, 2, None, 0)
    assert d.recommended == 10              # ceil(200/8)=25, clamped to maxReplicas
    assert d.replicas == 6                  # 2 + maxScaleUpStep
    assert d.reason == "ScaledUp" and "step limit" in d.message


def test_bounds_are_enforced_before_anything_else():
    assert decide(history(), SPEC, 0, None, 0).replicas == 1
    d = decide(history(fleet(0, 1000)), SPEC, 14, None, 0)
    assert (d.replicas, d.reason) == (10, "AboveMaxReplicas")
    d = decide(history(fleet(0, 1000, ready=10)), SPEC, 10, None, 0)
    assert (d.replicas, d.reason) == (10, "AtMaxReplicas")


def test_never_below_min_even_when_idle():
    spec = AutoscalingSpec(enabled=True, min_replicas=3, max_replicas=10,
                           scale_down_stabilization_seconds=0)
    h = MetricHistory()
    for s in steady(0, 0, ready=5):
        h = h.record(s, spec)
    d = decide(h, spec, 5, None, 600)
    assert (d.replicas, d.reason) == (3, "ScaledDown")


def test_sudden_queue_acts_on_newest_sample_not_window_average():
    samples = steady(0, 0, ready=2, until=45) + [fleet(60, 40, ready=2)]
    d = decide(history(*samples), SPEC, 2, None, 60)
    assert d.replicas == 5                   # ceil(40/8), not ceil(mean 8/8)
    assert d.queue_depth == pytest.approx(40 / 4)  # the window average is reported


def test_scale_down_waits_for_the_stabilization_window():
    busy = [fleet(t, 64, ready=8) for t in range(0, 301, 15)]
    idle = [fleet(t, 0, ready=8) for t in range(315, 1000, 15)]
    h = history(*busy)
    for s in idle:
        h = h.record(s, SPEC)
        d = decide(h, SPEC, 8, None, s.time)
        # The last busy sample (t=300) asked for 8; nothing lower before t=600.
        if s.time < 600:
            assert (d.replicas, d.reason) == (8, "ScaleDownStabilizing"), s.time
        if s.time == 600:   # the recommendations since t=315 still hold the partial
            assert d.replicas == 6, d  # window of t=315 (3 busy samples of 4): ceil(48/8)
        if s.time >= 660:   # every window of the last 300s idle
            assert (d.replicas, d.reason) == (1, "ScaledDown"), s.time
            break
    else:
        pytest.fail("never scaled down")


def test_no_scale_down_soon_after_the_last_scale():
    h = history(*steady(0, 0, ready=4))
    assert decide(h, SPEC, 4, None, 600).replicas == 1
    # Within a metrics window of the last scale the window describes the old fleet.
    assert decide(h, SPEC, 4, 560.0, 600).reason == "ScaleDownStabilizing"
    assert decide(h, SPEC, 4, 540.0, 600).replicas == 1


def test_fresh_history_does_not_scale_down():
    # An operator that lost its window must watch a whole window before scaling down.
    h = history(*steady(0, 0, ready=4, until=200))
    d = decide(h, SPEC, 4, None, 200)
    assert (d.replicas, d.reason) == (4, "ScaleDownStabilizing")


def test_scale_up_stabilization_needs_sustained_demand():
    spec = AutoscalingSpec(enabled=True, max_replicas=10, scale_up_stabilization_seconds=30)
    h = MetricHistory()
    for s in [fleet(0, 0), fleet(15, 0), fleet(30, 40)]:
        h = h.record(s, spec)
    assert decide(h, spec, 1, None, 30).reason == "ScaleUpStabilizing"
    for s in [fleet(45, 40), fleet(60, 40)]:
        h = h.record(s, spec)
    d = decide(h, spec, 1, None, 60)
    assert (d.replicas, d.reason) == (5, "ScaledUp")


def test_unknown_pods_are_left_out_of_the_average_not_counted_as_zero():
    # 3 ready pods, one answered with 24 waiting: the fleet is estimated at 72, not 24.
    d = decide(history(fleet(0, 24, ready=3, answered=1)), SPEC, 3, None, 0)
    assert d.recommended == 9 and d.replicas == 7   # step limit 4


def test_all_pods_unknown_holds():
    h = history(fleet(0, 0, ready=3, answered=0), fleet(15, 0, ready=3, answered=0))
    d = decide(h, SPEC, 3, None, 15)
    assert (d.replicas, d.reason) == (3, "MetricsUnavailable")
    # ... also when the only known samples are older than the window.
    h = history(fleet(0, 500, ready=3), fleet(100, 0, ready=3, answered=0))
    assert decide(h, SPEC, 3, None, 100).reason == "MetricsUnavailable"


def test_busy_fleet_under_steady_load_is_not_scaled_down():
    # Nothing waits, every replica runs 12 requests: capacity unknown -> hold.
    h = history(*steady(0, 48, ready=4, until=1200))
    d = decide(h, SPEC, 4, None, 1200)
    assert (d.replicas, d.reason) == (4, "WithinTarget")
    # Capacity known (16 per replica at saturation): 48 running occupy 3 replicas.
    h = history(*steady(0, 48, ready=4, until=1200), capacity=16)
    assert decide(h, SPEC, 4, None, 1200).replicas == 3
    # ... and 64 running occupy all 4: held although nothing waits.
    h = history(*steady(0, 64, ready=4, until=1200), capacity=16)
    assert decide(h, SPEC, 4, None, 1200).reason == "WithinTarget"


def test_running_requests_never_scale_up():
    # Capacity was learned at 4 but 64 run now: the running signal only holds replicas.
    h = history(*steady(0, 64, ready=2, until=600), capacity=4)
    assert decide(h, SPEC, 2, None, 600).replicas == 2


def test_small_queue_on_saturated_fleet_holds():
    # 4 saturated replicas with 16 waiting in all: the queue alone says 2, the running
    # requests say 4; scaling down would only grow the queue.
    h = history(*steady(16, 64, ready=4, until=1200, saturated=16))
    assert h.running_capacity == 16
    d = decide(h, SPEC, 4, None, 1200)
    assert (d.replicas, d.reason) == (4, "WithinTarget")


def test_replicas_still_starting_are_counted_against_the_queue():
    # 5 replicas set, 1 ready and saturated (16 running): the 4 starting ones will run
    # 64 of the waiting requests, so 50 waiting need nothing more ...
    h = history(fleet(0, 50, 16, ready=1, replicas=5, saturated=16))
    assert decide(h, SPEC, 5, 0.0, 0).reason == "WithinTarget"
    # ... while 200 waiting leave 136 to queue: 17 replicas' worth, bounded by the step.
    h = history(fleet(0, 200, 16, ready=1, replicas=5, saturated=16))
    assert decide(h, SPEC, 5, 0.0, 0).replicas == 9


def test_past_recommendations_use_the_replicas_of_their_time():
    # While 2 replicas were set and ready, 40 waiting asked for 5. Recomputed with the 8
    # set now (6 starting, 16 slots each) they would say 3; the window must keep the 5.
    h = history(*steady(40, 0, ready=2, until=450), capacity=16)
    h = h.record(fleet(600, 0, 0, ready=8, replicas=8), SPEC)
    d = decide(h, SPEC, 8, 300.0, 600)
    assert (d.replicas, d.reason) == (5, "ScaledDown"), d


def test_history_keeps_only_what_the_windows_need_and_survives_status():
    h = history(*steady(3, 5, ready=2, until=3000, saturated=5))
    assert h.samples[0].time >= 3000 - SPEC.retention_seconds
    assert len(h.samples) <= SPEC.retention_seconds / 15 + 1
    restored = MetricHistory.from_status(h.to_status())
    assert restored == h
    assert MetricHistory.from_status({"samples": [[1, 2]]}) == MetricHistory()


def test_capacity_is_relearned_for_another_replica_shape():
    h = history(fleet(0, 8, 16, saturated=16)).for_capacity_key("a")
    assert h.running_capacity is None            # first key: nothing known for it yet
    h = h.record(fleet(15, 8, 16, saturated=16), SPEC)
    assert h.for_capacity_key("a").running_capacity == 16
    assert h.for_capacity_key("b").running_capacity is None
    assert MetricHistory.from_status(h.to_status()).capacity_key == "a"


def test_samples_reject_inconsistent_counts():
    with pytest.raises(ValueError, match="num_answered"):
        Sample(0, 0, 0, 3, 2, 2)
    with pytest.raises(ValueError, match="waiting"):
        Sample(0, -1, 0, 1, 1, 1)


def test_restart_with_the_window_from_status_does_not_scale_down():
    # Busy until t=300 at 8 replicas; the operator restarts and restores its window from
    # status: idle samples after the restart scale down only once no window of the last
    # 300s holds a busy sample (the last window with one ends at t=345).
    h = MetricHistory.from_status(history(*steady(64, 128, ready=8, until=300)).to_status())
    for t in range(315, 645, 15):
        h = h.record(fleet(t, 0, 0, ready=8), SPEC)
        assert decide(h, SPEC, 8, 0.0, t).replicas == 8, t
    h = h.record(fleet(645, 0, 0, ready=8), SPEC)
    assert decide(h, SPEC, 8, 0.0, 645).reason == "ScaledDown"
    # An operator that lost the window instead sees only idle samples, and still waits.
    assert decide(history(fleet(330, 0, 0, ready=8)), SPEC, 8, None, 330).replicas == 8
