"""A running mirror's status part (`mirror-status`, replaced every `interval_s`): its heartbeat, and
how far behind the DR cluster is. Each status reads every mirrored partition's last stable offset
on the source, then its end on the DR cluster: `behind_records` is what the DR cluster lacks of
what the source had decided. `behind_s` bounds how long the oldest of those records has waited:
the DR cluster holds everything the source had decided at the last status whose source end it
has reached (`Lag`), so that record was decided after it. The DAG's sensor follows the heartbeat;
the report and the UI show the rest."""
from __future__ import annotations

import collections
import datetime
import os
import socket
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kmigrate.config import ClusterConfig
from kmigrate.kafka import ends as kafka_ends
from kmigrate.manifest import Manifest
from kmigrate.run.records import timeline

PART = "mirror-status"
# what the mirror's copy holds of a Spark Connect server (replaced each term): its address
# (sc://HOST:PORT, no token), its tasks and the server's task slots. Each task runs for a whole term,
# so another job on that server gets only the slots the mirror leaves.
SPARK_PART = "mirror-spark"
Key = tuple[str, int]
# how long the driver waits for a cluster's offsets: a source gone (an unplanned failover) must not hold
# back the heartbeat, nor the mirror's stop, for the admin's usual 30 s
STATUS_TIMEOUT_S = 10.0


def ends(cluster: ClusterConfig, keys: Sequence[Key], *, stable: bool, timeout_s: float = STATUS_TIMEOUT_S,
         away: bool = False, names: Mapping[str, str] | None = None) -> dict[Key, tuple[int, int]]:
    """{partition: (log start, end)} of `keys` on `cluster` (`kafka.ends.read`: raw ListOffsets to the
    leaders, both kinds asked before any answer is read); `stable`: the end is the last stable
    offset (what a live source has decided). A reading that fails (a leader moving, a broker away)
    is tried again, the leaders looked up anew, until `timeout_s` (its `retry`). `away` (the last reading
    failed): ClusterUnavailable at once when nothing listens (`ends.check_listening`), or when the
    reading fails, so that a driver whose source is gone sees its stop each interval, not after each
    reading's timeout. `names`: the topics' names on `cluster` (a mirror's on the DR cluster, its
    renames), each partition read under its name there and keyed as asked."""
    if not keys:
        return {}
    kinds = [kafka_ends.START, kafka_ends.STABLE if stable else kafka_ends.HIGH]
    starts, last = kafka_ends.read(cluster, keys, kinds, timeout_s, away=away, retry=True, names=names)
    return {k: (starts[k], last[k]) for k in keys}


class Lag:
    """Each partition's source end as each status read it, for KEEP_S: how long the oldest record the
    DR cluster lacks may have waited (None: longer than what is kept, or since the mirror began)."""

    KEEP_S = 600.0

    def __init__(self) -> None:
        self.seen: dict[Key, collections.deque[tuple[float, int]]] = {}

    def note(self, at: float, source_ends: Mapping[Key, int]) -> None:
        for key, end in source_ends.items():
            seen = self.seen.setdefault(key, collections.deque())
            seen.append((at, end))
            while len(seen) > 1 and seen[1][0] < at - self.KEEP_S:
                seen.popleft()

    def behind_s(self, now: float, key: Key, dr_end: int) -> float | None:
        seen = self.seen.get(key) or ()
        if not seen or dr_end >= seen[-1][1]:
            return 0.0
        reached = [at for at, end in seen if end <= dr_end]
        return round(now - max(reached), 3) if reached else None


def of_round(number: int, started: float, ended: float, source: Mapping[Key, tuple[int, int]],
             dr: Mapping[Key, tuple[int, int]], failed: Mapping[Key, str], groups: list[dict[str, Any]],
             totals: Mapping[str, int], behind_s: Mapping[Key, float | None] | None = None,
             own_ends: Mapping[Key, int] | None = None, asked: Mapping[Key, list[int]] | None = None,
             term: int | None = None, names: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Status `number` (`source`: each partition's log start and last stable offset read at `started`;
    `dr`: its log start and end on the DR cluster read after; `behind_s`: Lag's bound of each;
    `own_ends`: where the mirror's own copies left the DR ends, and `asked`: the copies not reported
    done, both kept for a restart; `term`: the copy's term, running or just ended; `names`: the
    topics' names on the DR cluster, a row's `dr_topic` where it differs)."""
    partitions = []
    for key in sorted(source):
        behind = max(0, source[key][1] - dr[key][1])
        lagging = behind or dr[key][0] < source[key][0]  # an error of a partition caught up since is not shown
        partitions.append({"topic": key[0], "partition": key[1], "source_end": source[key][1],
                           "dr_end": dr[key][1], "behind_records": behind,
                           "behind_s": (behind_s or {}).get(key) if behind else 0.0,
                           "error": failed.get(key) if lagging else None,
                           "own_end": (own_ends or {}).get(key), "asked": (asked or {}).get(key)})
        if (names or {}).get(key[0], key[0]) != key[0]:
            partitions[-1]["dr_topic"] = names[key[0]]
    behind_records, behind_s_max = lag(partitions)
    return {"round": number, "term": term, "as_of": timeline.iso(started), "heartbeat": timeline.iso(ended),
            "round_s": round(ended - started, 3), "host": socket.gethostname(), "pid": os.getpid(),
            "behind_records": behind_records, "behind_s_max": behind_s_max,
            "failed_partitions": sum(1 for p in partitions if p["error"]),
            "partitions": partitions, "groups": groups, "totals": dict(totals), "stopped": False, "error": None}


def mirrored_topics(status: Mapping[str, Any]) -> set[str]:
    """The topics a mirror's status holds on the DR cluster (by the source's names): those it copies,
    and those promoted there."""
    return {p["topic"] for p in status.get("partitions", [])} | {r["topic"] for r in status.get("promoted", [])}


def lag(partitions: Iterable[Mapping[str, Any]]) -> tuple[int, float]:
    """Rows with `behind_records` and `behind_s` (a status's partitions, or what a failover or drill
    took of them): the records behind in all, and the longest wait (an unknown one counts as none)."""
    rows = list(partitions)
    return (sum(r["behind_records"] for r in rows), max((r["behind_s"] or 0.0 for r in rows), default=0.0))


def write(manifest: Manifest, status: Mapping[str, Any], *, stopped: bool = False) -> None:
    if status:
        manifest.replace(PART, {**status, "stopped": stopped})


def read(manifest: Manifest) -> dict[str, Any] | None:
    return manifest.read(PART)


def server_address(remote: str) -> str:
    """sc://HOST:PORT of a Spark Connect URL, without its parameters (a token among them)."""
    return "sc://" + remote.split("://", 1)[-1].split("/", 1)[0].split(";", 1)[0]


def holds_every_slot(manifest: Manifest, remote: str | None) -> dict[str, Any] | None:
    """What the mirror of `manifest` holds of the Spark Connect server at `remote`, when it is every
    task slot (a job sent there waits for the mirror's term to end); else None."""
    held, status = manifest.read(SPARK_PART), read(manifest)
    if not remote or not held or (status or {}).get("stopped") or held["server"] != server_address(remote):
        return None
    return held if held["tasks"] >= held["slots"] else None


def heartbeat_age(status: Mapping[str, Any] | None, now: float | None = None) -> float | None:
    """Seconds since the mirror's last round ended; None before its first."""
    if not status:
        return None
    beat = datetime.datetime.fromisoformat(status["heartbeat"].replace("Z", "+00:00"))
    return (now if now is not None else time.time()) - beat.timestamp()
