"""The start-up heap, set aside from the garbage collector's passes.

By the time Baton serves, it holds a few million long-lived objects: the libraries'
modules and models, the tokenizer's tables, the agents, the app. Each full pass of
the cyclic collector walked all of them, about 180 ms with the event loop stopped: an
ack that met one waited that long (bench.ack_latency saw rounds at 320 to 360 ms where the
others took 30 to 40 ms). Frozen once start-up is done (CPython's `gc.freeze`, made for
this), they are never walked again; what is made afterwards is collected as usual.
"""

from __future__ import annotations

import gc


def freeze_start_up_heap() -> int:
    """Collect what start-up left as garbage, then freeze the rest; how many objects
    are frozen (exported as `baton_gc_frozen_objects`)."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
