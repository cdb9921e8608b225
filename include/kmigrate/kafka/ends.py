"""The ends of many partitions of one cluster, read with raw ListOffsets requests (v2) to their
leaders: every kind of end asked of every leader before any answer is read, so that a read of two
kinds costs one round trip, not one each, and no admin client's futures and threads. A mirror's
task reads the ends of its partitions not being copied about a dozen times a second; through the
admin client those reads took 10 ms each and three fifths of the task loop's Python time. Leaders
as `leaders` remembers them; a leader that moved is looked up again once, and a read that still
fails, or a broker that does not answer within `timeout_s`, raises ClusterUnavailable (its leaders
forgotten: the next read looks them up); a read with `retry` tries again until `timeout_s`. A cluster
the raw connection cannot reach (GSSAPI, OAUTHBEARER: `transport.raw_capable`) is read through
the admin client."""
from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Mapping, Sequence

from confluent_kafka import KafkaException

from kmigrate import client_settings
from kmigrate.config import ClusterConfig
from kmigrate.errors import ClusterUnavailable
from kmigrate.kafka import leaders, multi, transport, wire
from kmigrate.kafka.pool import shared_admin
from kmigrate.renames import partitions_there

TopicPartition = tuple[str, int]
START = (-2, 0)   # (timestamp, isolation): the log start offset
HIGH = (-1, 0)    # the high watermark
STABLE = (-1, 1)  # the last stable offset (read_committed)
CONNECT_S = 1.0  # how long `check_listening` waits for a bootstrap server to accept a connection
RETRY_S = 0.2  # between two tries of a reading that failed (`read`'s `retry`)
CLIENT_ID = "kmigrate-ends"


def read(cluster: ClusterConfig, partitions: Iterable[TopicPartition], kinds: Sequence[tuple[int, int]],
         timeout_s: float, *, away: bool = False, retry: bool = False,
         names: Mapping[str, str] | None = None) -> list[dict[TopicPartition, int]]:
    """For each of `kinds` (START, HIGH, STABLE), the offset of each partition (`away`: the last
    reading failed, `check_listening` first). With `retry`, a reading that fails (a leader moving, a
    broker away) is tried again, the leaders looked up anew, until `timeout_s`; with `away` too, the
    first failure is raised at once (whoever reads tries again at its next turn, and sees a stop
    meanwhile). `names`: the topics' names on `cluster` (a run's renames, on its target), each
    partition read under its name there and keyed as given."""
    if names:
        there = partitions_there(partitions, names)
        return [{there[k]: offset for k, offset in offsets.items()}
                for offsets in read(cluster, list(there), kinds, timeout_s, away=away, retry=retry)]
    if not retry:
        return _read_once(cluster, partitions, kinds, timeout_s, away=away)
    partitions = list(partitions)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return _read_once(cluster, partitions, kinds, max(1.0, deadline - time.monotonic()), away=away)
        except ClusterUnavailable:  # the leaders looked up again by the next reading
            if away or time.monotonic() + RETRY_S >= deadline:
                raise
            time.sleep(RETRY_S)


def _read_once(cluster: ClusterConfig, partitions: Iterable[TopicPartition], kinds: Sequence[tuple[int, int]],
               timeout_s: float, *, away: bool) -> list[dict[TopicPartition, int]]:
    if away:
        check_listening(cluster)
    partitions = list(dict.fromkeys(partitions))
    if not transport.raw_capable(cluster, "reading offsets with raw requests"):
        with shared_admin(cluster, timeout_s) as admin:
            readers = {START: admin.start_offsets, HIGH: admin.end_offsets, STABLE: admin.stable_ends}
            return [readers[kind](partitions, retry=True) for kind in kinds]
    try:
        try:
            return _read(cluster, partitions, kinds, timeout_s)
        except _Moved as moved:  # a leader moved (or is moving): looked up once more
            leaders.forget(cluster, moved.partitions)
        return _read(cluster, partitions, kinds, timeout_s, again=True)
    except ClusterUnavailable:
        # a leader on a broker gone refuses the connection (no moved leader's answer to forget it by):
        # the next reading looks the leaders up again
        leaders.forget(cluster, partitions)
        raise


def check_listening(cluster: ClusterConfig) -> None:
    """ClusterUnavailable at once when no bootstrap server of `cluster` accepts a TCP connection within
    CONNECT_S: a reading after a failed one, of a cluster gone, fails now instead of after its timeout,
    and whoever reads sees a stop at its next turn (a mirror told to end by an unplanned failover)."""
    if not client_settings.listening(cluster.name, cluster.bootstrap_servers, CONNECT_S):
        raise ClusterUnavailable(f"{cluster.name} cluster at {cluster.bootstrap_servers}: no bootstrap server "
                                 f"accepts a connection within {CONNECT_S:g}s")


class _Moved(Exception):
    def __init__(self, partitions: list[TopicPartition]) -> None:
        super().__init__(partitions)
        self.partitions = partitions


def _read(cluster: ClusterConfig, partitions: list[TopicPartition], kinds: Sequence[tuple[int, int]], timeout_s: float,
          again: bool = False) -> list[dict[TopicPartition, int]]:
    if not partitions:
        return [{} for _ in kinds]
    try:
        places = leaders.leaders(cluster, partitions, timeout_s)
    except (KafkaException, OSError) as exc:  # OSError: TimeoutError, the client not answering in time
        raise ClusterUnavailable(f"cluster {cluster.name} did not say its partitions' leaders: {exc}") from exc
    if len(places) < len(partitions):
        missing = [f"{t}[{p}]" for t, p in partitions if (t, p) not in places]
        raise ClusterUnavailable(f"cluster {cluster.name} has no leader for {', '.join(missing[:5])} now; read again "
                                 "once it has elected one")
    out: list[dict[TopicPartition, int]] = [{} for _ in kinds]
    failed: dict[TopicPartition, int] = {}
    grouped = multi.by_leader(places)
    try:
        with contextlib.ExitStack() as held:
            conns = {address: held.enter_context(leaders.connection(cluster, address, CLIENT_ID, timeout_s))
                     for address in grouped}
            for address, tps in grouped.items():
                for timestamp, isolation in kinds:
                    multi.send_list_offsets(conns[address], tps, timestamp=timestamp, isolation=isolation)
            for address in grouped:
                for answers in out:
                    for tp, (error, offset) in multi.receive_list_offsets(conns[address]).items():
                        if error:
                            failed[tp] = error
                        answers[tp] = offset
    except OSError as exc:  # a broker gone, or not answering in time (its connection closed)
        raise ClusterUnavailable(f"cluster {cluster.name} did not answer a read of its partitions' offsets in "
                                 f"{timeout_s:g} s: {exc}") from exc
    if failed:
        if not again and any(code in wire.TRANSIENT for code in failed.values()):
            raise _Moved(list(failed))
        tp, code = next(iter(failed.items()))
        raise ClusterUnavailable(f"cluster {cluster.name} answered {wire.error_name(code)} for the offsets of "
                                 f"{tp[0]}[{tp[1]}]" + (f" and {len(failed) - 1} more partitions" if len(failed) > 1 else ""))
    return out
