"""``freeze_startup_heap``: what a worker holds at DoFn setup leaves the GC's scans, and collections are rare."""

import subprocess
import sys

from beameval.testserver.harness import PROJECT_ROOT

_SCRIPT = """
import gc
import weakref
from transforms.worker_gc import YOUNG_THRESHOLD, freeze_startup_heap

class Node:
    pass

cycle = Node(); cycle.self = cycle; ref = weakref.ref(cycle); del cycle
assert gc.get_freeze_count() == 0
assert gc.get_threshold()[0] == 700
freeze_startup_heap()
assert gc.get_threshold()[0] == YOUNG_THRESHOLD > 700  # a collection per 50,000 allocations, not per 700
assert ref() is None                                   # garbage at setup was collected, not frozen for good
frozen = gc.get_freeze_count()
assert frozen > 1000, frozen                           # the interpreter's own objects, at least
kept = [Node() for _ in range(5000)]
freeze_startup_heap()                                  # a second DoFn's setup in the same process
assert gc.get_freeze_count() == frozen, (gc.get_freeze_count(), frozen)
later = Node(); later.self = later; ref = weakref.ref(later); del later
gc.collect()
assert ref() is None                                   # garbage made after the freeze is still collected
print(frozen)
"""


def test_the_startup_heap_is_frozen_once_and_later_garbage_is_still_collected() -> None:
    done = subprocess.run([sys.executable, "-c", _SCRIPT], cwd=PROJECT_ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 1000
