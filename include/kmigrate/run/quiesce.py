"""The quiesce sensor's poke: the source's end offsets still, and no selected consumer group with
members, for the quiesce window."""
from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from kmigrate.config import ClusterConfig
from kmigrate.errors import GroupActive
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.manifest import Manifest, Part
from kmigrate.run.plan import topics_partitions
from kmigrate.run.snapshot import selected_groups


def quiesce_sample(manifest: Manifest, source: ClusterConfig, topics: Sequence[str], stable_for_s: float,
                   groups: str = "") -> bool:
    """One poke of the quiesce sensor: record the source's end offsets and the selected groups that
    have members (part quiesce/<n>); True when the ends equal the first sample of an unbroken run of
    equal samples at least `stable_for_s` old and no selected group has members. A group that has
    had members for `stable_for_s` once the ends are still is refused (GroupActive, naming it and its
    members): its consumer is running, and its offsets would be copied from under it (the groups of
    sink connectors the run paused on an old worker keep their members and are not counted). The samples
    live in the manifest, so the sensor holds no worker between pokes."""
    if manifest.exists(Part.SNAPSHOT):
        return True  # the snapshot is taken: quiescing is behind this run
    with ClusterAdmin(source) as admin:
        ends = {f"{t}:{p['partition']}": p["end"] for t, parts in topics_partitions(admin, topics).items() for p in parts}
        paused = set((manifest.read(Part.CONNECTOR_STATES) or {}).get("paused_groups", ()))
        live = {group: members for group in selected_groups(admin, groups, set(topics))
                if group not in paused and (members := admin.live_members(group))}
    samples = sorted((p for p in manifest.parts() if p.startswith(f"{Part.QUIESCE}/")), key=lambda p: int(p.split("/")[1]))
    now = time.time()
    manifest.write_once(f"{Part.QUIESCE}/{len(samples)}", {"at": now, "ends": ends, "live_groups": live})
    stable_since = now
    live_since = dict.fromkeys(live, now)
    previous = _Lazy(manifest, reversed(samples))  # read back only as far as the samples stay equal
    for sample in previous:
        if sample["ends"] != ends:
            break
        stable_since = sample["at"]
    for group in live:
        for sample in previous:
            if group not in sample.get("live_groups", {}):
                break
            live_since[group] = sample["at"]
    if now - stable_since < stable_for_s:
        return False
    refused = sorted(g for g, since in live_since.items() if now - since >= stable_for_s)
    if refused:
        detail = "; ".join(f"{g!r} (members {', '.join(live[g])})" for g in refused)
        raise GroupActive(
            f"consumer group{'s' if len(refused) > 1 else ''} {detail} still consume{'' if len(refused) > 1 else 's'} "
            f"on the source cluster ({source.bootstrap_servers}) after {stable_for_s:.0f}s of quiesce; their offsets "
            "would be copied from under a running consumer. Nothing was copied for them. Stop those consumers, then "
            "clear this task to quiesce again (or run the rollback DAG to resume the source connectors)",
            group=refused[0])
    return not live


class _Lazy:
    """The earlier samples, newest first, each read from the manifest when first needed."""

    def __init__(self, manifest: Manifest, parts: Iterable[str]) -> None:
        self._manifest, self._parts, self._read = manifest, iter(parts), []

    def __iter__(self) -> Iterator[dict[str, Any]]:
        yield from self._read
        for part in self._parts:
            self._read.append(self._manifest.read(part))
            yield self._read[-1]


def quiesce_poke(manifest: Manifest, source: ClusterConfig, topics: Sequence[str], stable_for_s: float,
                 groups: str = "", budget_s: float = 60.0) -> bool:
    """One poke of the quiesce sensor: samples (quiesce_sample) every quarter of the quiesce window
    (0.25 s to 5 s apart) until the source is quiet, or False once `budget_s` is spent (the sensor
    pokes again later, holding no worker meanwhile). Quiet sources pass within about
    `stable_for_s` + 0.25 s instead of waiting for a next poke."""
    interval = min(5.0, max(0.25, stable_for_s / 4))
    deadline = time.monotonic() + max(budget_s, stable_for_s + 2 * interval)
    while True:
        if quiesce_sample(manifest, source, topics, stable_for_s, groups):
            return True
        if time.monotonic() + interval > deadline:
            return False
        time.sleep(interval)
