"""Ports for processes a test starts (a bot told `PORT=…`), and ports nobody listens on.

Asking the kernel for port 0 and closing the probe hands out an ephemeral port, which
any client connection on the machine (another parallel worker's) may take before the
bot binds it. So each xdist worker draws from a range of its own below the kernel's
ephemeral ports, which nothing else here hands out.
"""

from __future__ import annotations

import itertools
import os
import socket

_FIRST = 20_000
_PER_WORKER = 1_000
_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").lstrip("gw") or 0) % 10
_candidates = itertools.cycle(
    range(_FIRST + _WORKER * _PER_WORKER, _FIRST + (_WORKER + 1) * _PER_WORKER)
)


def free_port() -> int:
    """A port of this worker's range that nothing listens on now."""
    for _ in range(_PER_WORKER):
        port = next(_candidates)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in worker {_WORKER}'s range")
