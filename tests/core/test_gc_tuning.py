"""The worker's collector settings: frozen start-up heap, rare young collections, cycles still freed."""

from __future__ import annotations

import subprocess
import sys

# In a child process: freezing the test process's own heap would change every later test's collections.
CHILD = """
import gc, weakref
from beameval.core.gc_tuning import YOUNG_THRESHOLD, tune_for_streaming
default = gc.get_threshold()
tune_for_streaming()
frozen = gc.get_freeze_count()
tune_for_streaming()  # a second stage's setup in the same process changes nothing
class Node: pass
a, b = Node(), Node()
a.other, b.other = b, a
alive = weakref.ref(a)
del a, b
gc.collect()
young, still = gc.get_threshold()[0], gc.get_freeze_count()
print(default[0], young == YOUNG_THRESHOLD > default[0], frozen > 1000, still == frozen, alive() is None)
"""


def test_tuning_freezes_the_start_up_heap_and_spaces_collections_out() -> None:
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["700", "True", "True", "True", "True"]
