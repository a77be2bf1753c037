"""The start-up heap is set aside from the collector's passes, and nothing is lost by it:
garbage made afterwards, cycles included, is still collected. Run in a child process,
since freezing is for the rest of the process (the tests' own heap included)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

CHILD = textwrap.dedent(
    """
    import gc, weakref
    from bot.heap import freeze_start_up_heap
    from bot.metrics import render

    class Node:
        pass

    kept = [Node() for _ in range(1000)]            # start-up state, still referenced
    dropped = Node(); dropped.me = dropped            # start-up garbage: a cycle
    dropped_ref = weakref.ref(dropped); del dropped
    frozen = freeze_start_up_heap()
    assert dropped_ref() is None, "start-up garbage was frozen instead of collected"
    assert frozen == gc.get_freeze_count() > len(kept)
    assert f"baton_gc_frozen_objects {float(frozen)}" in render().decode()

    later = Node(); later.me = later                  # garbage made while serving
    later_ref = weakref.ref(later); del later
    gc.collect()
    assert later_ref() is None, "a cycle made after the freeze was not collected"
    assert gc.get_freeze_count() == frozen          # and the start-up heap stays frozen
    print("ok", frozen)
    """
)


def test_the_start_up_heap_is_frozen_and_later_garbage_still_collected() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok "), done.stdout
