"""What the benchmark scripts share: removing what a benchmark created, so that a run leaves no
data behind on the local clusters (the migration itself never deletes anything), and the interval
that says how far a median of a few noisy rounds can be trusted, and writing a result into
docs/BENCHMARKS.md between a benchmark's markers."""
from __future__ import annotations

import math
import time
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path

from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic
from kmigrate.config import ClusterConfig


def delete_topics(cluster: ClusterConfig, topics: Iterable[str]) -> list[str]:
    """Delete those of `topics` that exist on `cluster`; returns them."""
    admin = AdminClient(cluster.admin())
    present = sorted(set(topics) & set(admin.list_topics(timeout=30).topics))
    if present:
        for future in admin.delete_topics(present, operation_timeout=60).values():
            future.result(timeout=90)
    return present


def wait_until_settled(cluster: ClusterConfig, quick_s: float = 1.0, timeout_s: float = 180.0) -> float:
    """Wait until the cluster creates a topic quickly again: a broker still taking thousands of
    deleted partitions apart applies a new topic seconds late (measured here: 2,000 partitions made
    in 0.1 s on a quiet broker, 6.8 s right after 2,000 were deleted), which would charge the
    previous step's deletions to the next measured step. Probes with a one-partition topic until
    its leader shows within `quick_s`; returns the seconds waited."""
    admin = AdminClient(cluster.admin())
    began = time.monotonic()
    while True:
        probe = f"bench-probe-{uuid.uuid4().hex[:8]}"
        created = time.monotonic()
        for future in admin.create_topics([NewTopic(probe, 1, 1)], operation_timeout=30).values():
            future.result(timeout=60)
        while True:
            try:
                described = admin.describe_topics(TopicCollection([probe]), request_timeout=30)[probe].result(timeout=30)
                if described.partitions and described.partitions[0].leader is not None:
                    break
            except Exception:  # noqa: BLE001 - not known to the broker yet
                pass
            time.sleep(0.05)
        took = time.monotonic() - created
        for future in admin.delete_topics([probe], operation_timeout=30).values():
            future.result(timeout=60)
        if took <= quick_s:
            return time.monotonic() - began
        if time.monotonic() - began > timeout_s:
            raise SystemExit(f"bench: {cluster.name} still takes {took:.1f} s to create a topic after {timeout_s:.0f} s")
        time.sleep(2.0)


def delete_groups(cluster: ClusterConfig, groups: Iterable[str]) -> None:
    """Delete `groups` on `cluster`; a group that does not exist there is fine."""
    groups = list(groups)
    if not groups:
        return
    admin = AdminClient(cluster.admin())  # kept referenced: a collected client never completes its futures
    for future in admin.delete_consumer_groups(groups, request_timeout=30).values():
        try:
            future.result(timeout=60)
        except Exception:  # noqa: BLE001 - the group was never created on this cluster
            pass


def median_interval(values: Sequence[float], level: float = 0.9) -> tuple[float, float, float]:
    """A distribution-free confidence interval of the median of `values`: the k-th smallest and
    k-th largest value, with the largest k whose coverage is at least `level` (any continuous
    distribution: each value is below the median with probability 1/2, so the number below is
    Binomial(n, 1/2)). Returns (low, high, coverage); with too few values for `level`, the
    widest interval there is, (min, max), and its smaller coverage."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        raise ValueError("no values")

    def coverage(k: int) -> float:  # P(X_(k) <= median <= X_(n-k+1))
        return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2 ** n

    k = 1
    while k + 1 <= (n + 1) // 2 and coverage(k + 1) >= level:
        k += 1
    return ordered[k - 1], ordered[n - k], coverage(k)


def write_docs(text: str, path: Path, start: str, end: str) -> None:
    """Put `text` (which begins with the marker `start` and ends with `end`) in place of what stands
    between those markers in the file at `path`, or after its end when they are not there yet."""
    current = path.read_text() if path.exists() else "# Benchmarks\n\nResults written by the benchmark scripts.\n"
    if start in current and end in current:
        before, rest = current.split(start, 1)
        after = rest.split(end, 1)[1].lstrip("\n")
        current = before + text + ("\n" + after if after else "")
    else:
        current = current.rstrip("\n") + "\n\n" + text
    path.write_text(current)
