"""The stack-sample profiler's file is written whatever the sampling thread is doing."""
from __future__ import annotations

import threading

from kubellm.runtime.engine_core import profiler


def test_write_stops_the_sampler_before_reading_its_counts(tmp_path):
    """Reading the counters while the thread adds a frame it has not seen raised inside
    atexit and left no file; write() now stops the thread first and always writes."""
    busy = threading.Event()

    def spin(depth=0):   # new frames (recursion depths) for the sampler to count
        if depth < 50 and not busy.is_set():
            spin(depth + 1)
    def keep_spinning():
        while not busy.is_set():
            spin()
    worker = threading.Thread(target=keep_spinning, daemon=True)
    worker.start()
    sampler = profiler._Sampler()
    sampler.start()
    try:
        while sampler.num_samples == 0:
            busy.wait(profiler.INTERVAL_S)
        sampler.write(str(tmp_path / "p.txt"), {"steps": 3, "step_s": 1.5})
        assert not sampler.is_alive()
        samples = sampler.num_samples
        busy.wait(5 * profiler.INTERVAL_S)
        assert sampler.num_samples == samples     # nothing sampled after the write
    finally:
        busy.set()
        worker.join(5)
    text = (tmp_path / "p.txt").read_text()
    assert "counters: steps=3, step_s=1.500" in text and "top 40 by self share" in text
