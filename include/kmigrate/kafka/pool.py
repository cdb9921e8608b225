"""Clients kept per process for reuse. On a secured cluster every new client pays TLS handshakes
and SASL rounds (about 45 ms a client on the development machine, against 5 ms on PLAINTEXT), and
a worker copying partition after partition would pay them for each. A pooled client has one user
at a time, goes back to the pool when its block ends normally, is closed when the block raises
(it may be in any state) and when it has been idle for `idle_s`. Up to `per_key` idle clients a key
are kept: a mirror's task copies 8 partitions at once, and with 4 kept the others made and closed
a client each copy (the mirror's lag p50 0.42 s against 0.24 s with 8, measured side by side); 10,
as the task reads its partitions' ends while its 8 copies run (with 8 kept, one read in 20 made a
new client: 55 ms at the 99th percentile against 1.3 ms at the median). What stays idle `idle_s` is
closed by the next use, or by a daemon thread while the pool holds idle clients and no one uses it:
before, a Spark worker between jobs kept its pooled clients, each with its librdkafka threads, until
its next job."""
from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

from kmigrate.config import ClusterConfig
from kmigrate.kafka.admin import ClusterAdmin

T = TypeVar("T")


class Pool(Generic[T]):
    def __init__(self, close: Callable[[T], None], idle_s: float = 30.0, per_key: int = 10,
                 usable: Callable[[T], bool] = lambda client: True) -> None:
        self._close, self.idle_s, self.per_key, self._usable = close, idle_s, per_key, usable
        self._idle: dict[Hashable, list[tuple[float, T]]] = {}
        self._lock = threading.Lock()
        self._reaper: threading.Thread | None = None

    def _stale(self) -> list[T]:
        """Take out what has been idle too long, whatever its key (the lock held)."""
        now, stale = time.monotonic(), []
        for idle in self._idle.values():
            stale += [c for used_at, c in idle if now - used_at >= self.idle_s]
            idle[:] = [(used_at, c) for used_at, c in idle if now - used_at < self.idle_s]
        return stale

    def _reap(self) -> None:
        """Close what stays idle too long until the pool holds nothing idle, then end."""
        while True:
            time.sleep(self.idle_s / 2)
            with self._lock:
                stale = self._stale()
                if not any(self._idle.values()):
                    self._reaper = None
            for c in stale:
                self._close(c)
            if self._reaper is not threading.current_thread():
                return

    @contextlib.contextmanager
    def use(self, key: Hashable, make: Callable[[], T]) -> Iterator[T]:
        """An idle client for `key`, or a new one from `make`."""
        client = None
        with self._lock:
            stale = self._stale()
            idle = self._idle.get(key, [])
            while idle and client is None:  # one no longer usable (its broker restarted) is closed
                _, client = idle.pop()
                if not self._usable(client):
                    stale.append(client)
                    client = None
        for c in stale:
            self._close(c)
        if client is None:
            client = make()
        try:
            yield client
        except BaseException:
            self._close(client)
            raise
        with self._lock:
            idle = self._idle.setdefault(key, [])
            if len(idle) < self.per_key:
                idle.append((time.monotonic(), client))
                if self._reaper is None or not self._reaper.is_alive():  # a forked process has none running
                    self._reaper = threading.Thread(target=self._reap, name="kmigrate-pool-reaper", daemon=True)
                    self._reaper.start()
                return
        self._close(client)

    def idle(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._idle.values())

    def close_all(self) -> None:
        with self._lock:
            everything = [c for idle in self._idle.values() for _, c in idle]
            self._idle.clear()
        for c in everything:
            self._close(c)


def identity(cluster: ClusterConfig) -> tuple:
    """A cluster's settings as a key: the same settings, the same principal on the same cluster."""
    return tuple(sorted((k, str(v)) for k, v in cluster.settings.items()))


admins: Pool[ClusterAdmin] = Pool(ClusterAdmin.close)


@contextlib.contextmanager
def shared_admin(cluster: ClusterConfig, timeout_s: float = 30.0) -> Iterator[ClusterAdmin]:
    """A ClusterAdmin (admin client and offsets reader) from this process's pool, its calls timed out
    after `timeout_s` (set at each use: one pooled client serves every timeout)."""
    with admins.use(identity(cluster), lambda: ClusterAdmin(cluster, timeout_s)) as admin:
        admin.timeout_s = timeout_s
        yield admin
