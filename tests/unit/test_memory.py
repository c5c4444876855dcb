"""Freed memory goes back to the operating system (runtime.kube.memory), measured in a child
process of its own so that nothing else the test session holds moves its RSS."""

from __future__ import annotations

import subprocess
import sys

import pytest

from runtime.kube.memory import release_free_memory

FRAGMENTED_THEN_RELEASED = """
import sys
from runtime.kube.memory import release_free_memory

def rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

# Objects too big for CPython's small-object allocator but under malloc's mmap threshold: they live
# in malloc's heap. One in eight is kept, so the heap cannot shrink from its top on its own.
blocks = [bytes(4000 + i % 64) for i in range(50_000)]
kept = blocks[::8]
del blocks
before = rss_mb()
assert release_free_memory()
after = rss_mb()
print(before, after, len(kept))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_the_memory_a_burst_freed_goes_back_to_the_os() -> None:
    if not release_free_memory():
        pytest.skip("this C library has no malloc_trim")
    run = subprocess.run([sys.executable, "-c", FRAGMENTED_THEN_RELEASED], capture_output=True, text=True, check=True)
    before, after, _ = (float(figure) for figure in run.stdout.split())
    # 50,000 blocks of ~4 KB: ~200 MB allocated, ~175 MB of it freed but still resident before the trim
    assert before - after > 100, (before, after)
