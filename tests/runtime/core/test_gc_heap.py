"""freeze_startup_heap: startup's survivors go to the permanent generation and the young
generation's threshold goes up (run in a fresh interpreter: freezing this test
process's heap would outlive the test)."""
from __future__ import annotations

import subprocess
import sys

from tests.paths import ROOT

SCRIPT = """
import gc
from kubellm.runtime.core.gc_heap import YOUNG_THRESHOLD, freeze_startup_heap
kept = [[i] for i in range(10_000)]          # long-lived, built at "startup"
assert gc.get_freeze_count() == 0
frozen = freeze_startup_heap()
assert frozen >= 10_000, frozen
assert gc.get_count()[2] == 0 and all(not gc.is_finalized(x) for x in kept[:3])
assert gc.get_threshold() == (YOUNG_THRESHOLD, 10, 10)   # the older two as CPython's
print(frozen)
"""


def test_startup_objects_leave_the_collected_generations():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.strip()) >= 10_000
