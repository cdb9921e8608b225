"""Quota throttling on the raw connection (KIP-219): a broker over a client quota (producer or
consumer byte rate, request rate) answers at once with `throttle_time_ms` and mutes the connection
for that long. Like Kafka's own clients, the raw connection then sends nothing more on that
connection until the time has passed, instead of letting its pipelined requests wait in the
broker's socket buffer against their timeouts. The first throttle of each broker is logged;
`observed` counts them all in this process (responses, milliseconds asked for, milliseconds waited)."""
from __future__ import annotations

import logging
import struct
import threading
import time
from typing import Any

log = logging.getLogger(__name__)

_lock = threading.Lock()
observed = {"responses": 0, "ms": 0, "waited_ms": 0}
_logged: set[Any] = set()


def note(conn: Any, data: memoryview | bytes, at: int | None = None) -> int:
    """Read the throttle time of a response body (`at` its position; None: the last four bytes, where
    Produce v1-v8 puts it) and hold `conn` back for it. Returns the throttle time in milliseconds."""
    try:
        (ms,) = struct.unpack_from(">i", data, len(data) - 4 if at is None else at)
    except struct.error:
        return 0
    if ms <= 0:
        return 0
    conn.throttled_until = time.monotonic() + ms / 1000
    try:
        peer = conn._sock.getpeername()[:2]
    except (AttributeError, OSError):
        peer = "?"
    with _lock:
        observed["responses"] += 1
        observed["ms"] += ms
        first = peer not in _logged
        _logged.add(peer)
    if first:
        log.warning("the broker at %s throttles this client (a quota): %d ms; each throttled connection waits as "
                    "long as the broker asks before its next request (logged once a broker)", peer, ms)
    return ms


def wait(conn: Any) -> None:
    """Before a request on `conn`: wait out the throttle time its broker last asked for."""
    delay = getattr(conn, "throttled_until", 0.0) - time.monotonic()
    if delay > 0:
        time.sleep(delay)
        with _lock:
            observed["waited_ms"] += round(delay * 1000)


def reset() -> dict[str, int]:
    """The counts so far, then zero (tests)."""
    with _lock:
        counts = dict(observed)
        observed.update(responses=0, ms=0, waited_ms=0)
        return counts
