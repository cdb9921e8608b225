"""The quiesce sensor's poke: the source's end offsets still, every transaction on them decided, and
no selected consumer group with members, for the quiesce window."""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from kmigrate.config import ClusterConfig
from kmigrate.errors import GroupActive, TransactionOpen
from kmigrate.kafka import txn_wire
from kmigrate.kafka.pool import shared_admin
from kmigrate.manifest import Manifest, Part
from kmigrate.run.checks.request import MEMBER_TIMEOUT_S
from kmigrate.run.copying.plan import topics_partitions
from kmigrate.run.cutover.snapshot import selected_groups

log = logging.getLogger(__name__)

MEMBER_SESSION_TIMEOUT_S = float(MEMBER_TIMEOUT_S)  # the request's default (kmigrate.run.checks.request)


def quiesce_sample(manifest: Manifest, source: ClusterConfig, topics: Sequence[str], quiesce_s: float,
                   groups: str = "", member_timeout_s: float = MEMBER_SESSION_TIMEOUT_S,
                   seen: dict[str, float] | None = None) -> bool:
    """One poke of the quiesce sensor: record the source's end offsets, the partitions whose last
    stable offset is short of their end (a transaction open) and the selected groups that have
    members (part quiesce/<n>); True when the ends equal the first sample of an unbroken run of
    equal samples at least `quiesce_s` old, no transaction is open and no selected group has
    members.

    A transaction still open once the ends have stood still that long is refused (TransactionOpen,
    naming the partition, the transaction's first offset and its producer where the broker tells).
    A group with members is waited for while its committed offsets stand still, up to
    `member_timeout_s` (a member whose consumer stopped without leaving the group stays until its
    session expires); one whose offsets move, or whose members outlive that, is refused (GroupActive:
    its consumer runs, and its offsets would be copied from under it). The groups of sink connectors
    the run paused on an old worker keep their members and are not counted. The samples live in the
    manifest, so a retried step continues the run of equal samples. `seen["stable_since"]` is set to
    when the ends began to stand as they are (epoch seconds)."""
    if manifest.exists(Part.SNAPSHOT):
        return True  # the snapshot is taken: quiescing is behind this run
    # the ends read now equal to those an earlier sample had read by its end (its "at") stood still
    # from that end to this sample's start at least: the time they are known to have stood still
    sampled_from = time.time()
    with shared_admin(source) as admin:  # a client kept between samples: a sample is its requests only
        marks = topics_partitions(admin, topics)
        keys = [(t, p["partition"]) for t, parts in marks.items() for p in parts]
        stable = admin.stable_ends(keys, retry=True)
        ends = {f"{t}:{p['partition']}": p["end"] for t, parts in marks.items() for p in parts}
        unstable = {f"{t}:{p}": stable[(t, p)] for t, p in keys if stable[(t, p)] < ends[f"{t}:{p}"]}
        paused = set((manifest.read(Part.CONNECTOR_STATES) or {}).get("paused_groups", ()))
        offsets = selected_groups(admin, groups, set(topics))
        live = {group: members for group in offsets if group not in paused and (members := admin.live_members(group))}
    samples = sorted((p for p in manifest.parts() if p.startswith(f"{Part.QUIESCE}/")), key=lambda p: int(p.split("/")[1]))
    now = time.time()
    moved = {g: _offsets_key(offsets[g]) for g in live}
    manifest.write_once(f"{Part.QUIESCE}/{len(samples)}", {"at": now, "ends": ends, "unstable": unstable,
                                                           "live_groups": live, "live_offsets": moved})
    stable_since = now
    live_since = dict.fromkeys(live, now)
    still_since = dict.fromkeys(live, now)  # since when each live group's offsets stand as they are now
    previous = _Lazy(manifest, reversed(samples))  # read back only as far as the samples stay equal
    for sample in previous:
        if sample["ends"] != ends:
            break
        stable_since = sample["at"]
    if seen is not None:
        seen["stable_since"] = stable_since
    for group in live:
        unchanged = True
        for sample in previous:
            if group not in sample.get("live_groups", {}):
                break
            live_since[group] = sample["at"]
            unchanged = unchanged and sample.get("live_offsets", {}).get(group) == moved[group]
            if unchanged:
                still_since[group] = sample["at"]
    if sampled_from - stable_since < quiesce_s:
        return False
    if unstable:
        _refuse_open(source, unstable, quiesce_s)
    # committed offsets that moved within the window: a consumer is working; standing still: it may
    # have stopped without leaving, and the broker drops it once its session expires
    consuming = sorted(g for g in live if now - live_since[g] >= quiesce_s and now - still_since[g] < quiesce_s)
    lingering = sorted(g for g in live if now - live_since[g] >= max(quiesce_s, member_timeout_s)
                       and g not in consuming)
    waiting = sorted(set(live) - set(consuming) - set(lingering))
    if waiting and not consuming and not lingering:
        log.info("consumer group%s %s still ha%s members, but %s offsets stand still: waiting up to %.0f s for the "
                 "broker to expire members whose consumer stopped without leaving the group (Kafka Streams closes so; "
                 "the group's session.timeout.ms decides)", "s" if len(waiting) > 1 else "", ", ".join(map(repr, waiting)),
                 "ve" if len(waiting) > 1 else "s", "their" if len(waiting) > 1 else "its", member_timeout_s)
    if consuming or lingering:
        raise GroupActive(_group_text(source, live, consuming, lingering, quiesce_s, member_timeout_s),
                          group=(consuming or lingering)[0])
    return not live


def _offsets_key(offsets: Sequence[Mapping[str, Any]]) -> str:
    return ",".join(f"{o['topic']}:{o['partition']}:{o['offset']}" for o in offsets)


def _refuse_open(source: ClusterConfig, unstable: Mapping[str, int], quiesce_s: float) -> None:
    stable_at = {(key.rsplit(":", 1)[0], int(key.rsplit(":", 1)[1])): stable for key, stable in unstable.items()}
    names = [f"{t}[{p}]: {phrase}" for (t, p), phrase in sorted(txn_wire.describe_all_open(source, stable_at).items())]
    raise TransactionOpen(
        f"the source's end offsets stood still for {quiesce_s:.0f}s, but {len(names)} partition"
        f"{'s hold' if len(names) > 1 else ' holds'} a transaction that is still open: " + "; ".join(names)
        + ". What it will hold is not decided, so no snapshot was taken and nothing was copied in the window. "
        "Let its producer commit or abort it (a producer that was killed is aborted by the broker after its "
        "transaction.timeout.ms), then clear this task to quiesce again; or run the rollback DAG to resume the "
        "source connectors")


def _group_text(source: ClusterConfig, live: Mapping[str, list[str]], consuming: list[str], lingering: list[str],
                quiesce_s: float, member_timeout_s: float) -> str:
    refused = consuming + lingering
    detail = "; ".join(f"{g!r} (members {', '.join(live[g])})" for g in refused)
    many = len(refused) > 1
    reasons = []
    if consuming:
        reasons.append(f"{', '.join(map(repr, consuming))}: committed offsets moved during the {quiesce_s:.0f}s of "
                       "quiesce")
    if lingering:
        reasons.append(f"{', '.join(map(repr, lingering))}: members stayed for more than {member_timeout_s:.0f}s while "
                       "the offsets stood still, longer than a session lasts without heartbeats, so a consumer still "
                       "runs (idle or paused); if it stopped for good and its group's session.timeout.ms is longer, "
                       "set member_session_timeout_s to it")
    return (f"consumer group{'s' if many else ''} {detail} still consume{'' if many else 's'} on the source cluster "
            f"({source.bootstrap_servers}) ({'; '.join(reasons)}); their offsets would be copied from under a running "
            "consumer. Nothing was copied for them. Stop those consumers, then clear this task to quiesce again (or "
            "run the rollback DAG to resume the source connectors)")


class _Lazy:
    """The earlier samples, newest first, each read from the manifest when first needed."""

    def __init__(self, manifest: Manifest, parts: Iterable[str]) -> None:
        self._manifest, self._parts, self._read = manifest, iter(parts), []

    def __iter__(self) -> Iterator[dict[str, Any]]:
        yield from self._read
        for part in self._parts:
            self._read.append(self._manifest.read(part))
            yield self._read[-1]


def quiesce_poke(manifest: Manifest, source: ClusterConfig, topics: Sequence[str], quiesce_s: float,
                 groups: str = "", budget_s: float = 60.0,
                 member_timeout_s: float = MEMBER_SESSION_TIMEOUT_S, ready: Callable[[], bool] | None = None) -> bool:
    """Sample (quiesce_sample) until the source is quiet, or False once `budget_s` is spent. Samples
    are a quarter of the quiesce window apart (0.25 s to 5 s), and the one that can pass is taken
    the moment the ends have stood still for `quiesce_s`: a quiet source passes within about
    `quiesce_s` plus one sample's time, not a sampling interval more. With `ready` (the
    connectors' stop, begun before), a sample counts only once `ready()` held before it was taken:
    the quiesce samples while the connectors stop, and passes no earlier than their stop."""
    interval = min(5.0, max(0.25, quiesce_s / 4))
    deadline = time.monotonic() + max(budget_s, quiesce_s + 2 * interval)
    seen: dict[str, float] = {}
    settled = ready is None
    while True:
        settled = settled or ready()
        if quiesce_sample(manifest, source, topics, quiesce_s, groups, member_timeout_s, seen=seen) and settled:
            return True
        due = seen.get("stable_since", time.time()) + quiesce_s - time.time()
        pause = min(interval, due + 0.005) if due > 0 else (interval if settled else min(interval, 0.1))
        if time.monotonic() + pause > deadline:
            return False
        time.sleep(pause)


def quiesce_began(manifest: Manifest, poke_began: float) -> float:
    """When the run's quiesce began, for its row in the timeline: its first sample (an earlier
    poke's), or `poke_began` (epoch seconds) when that is earlier or there is none."""
    first = manifest.read(f"{Part.QUIESCE}/0")
    return min(poke_began, first["at"]) if first else poke_began
