"""The mirror's rounds (docs/DESIGN.md §12). Each round reads, in one ListOffsets request a kind,
every mirrored partition's log start and last stable offset on the source and its log start and
end on the DR cluster, copies the partitions that are behind up to the source's last stable
offset then (the copier of §4 in its live mode: transactions whole, compaction gaps and log start
moves as on the source, each copy resuming from the DR cluster's end with its checks), copies the
selected groups' committed offsets (`groups.sync_groups`), and replaces the run's status part
(`status`): the heartbeat, and each partition's lag. The selection is read again every
`refresh_s`: a topic created on the source that matches it is created on the DR cluster and
mirrored from then on, partitions added and configs changed on the source are applied
(`prepare_targets`).

Pure Python: a round's copy is handed in (`copy_round`), so the loop runs the same under a Spark
job (kmigrate_spark.mirror_job) and in a test."""
from __future__ import annotations

import dataclasses
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kmigrate.claims import claim_topics
from kmigrate.config import ClusterConfig
from kmigrate.errors import ConfigError, KmigrateError
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.pool import shared_admin
from kmigrate.manifest import Manifest, ManifestConflict, Part
from kmigrate.model import WorkUnit
from kmigrate.run.checks.selection import compile_pattern, select
from kmigrate.run.mirror import groups as group_sync
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.report import timeline
from kmigrate.run.targets.prepare import prepare_targets

Key = tuple[str, int]
SPEC = "mirror-spec"                       # what the run's mirror selects, written once
STOP = Part.event("mirror-stop-requested")  # a failover (or a user) asks the mirror to stop
STARTS = "mirror-starts"                   # attempts: one a start of the mirror job
# the mirrored ranges verified while the source is live, replaced as the mirror verifies more: named as
# an attempt of the live verification, so that a failover's window reads only what came after them
VERIFIED = f"{Part.LIVE_VERIFICATION}/mirror"


@dataclasses.dataclass(frozen=True)
class MirrorSpec:
    """What a mirror keeps on the DR cluster: topics (include/exclude regexes) and consumer groups
    (regex, empty: none); a round at most every `interval_s`, the selection read again every
    `refresh_s`, what the rounds copied verified every `verify_every_s`."""

    topics_include: str
    topics_exclude: str = ""
    groups: str = ""
    interval_s: float = 1.0
    refresh_s: float = 10.0
    verify_every_s: float = 30.0

    def check(self) -> None:
        compile_pattern(self.topics_include, "topic include")
        for pattern, what in ((self.topics_exclude, "topic exclude"), (self.groups, "consumer group")):
            if pattern:
                compile_pattern(pattern, what)
        if not 0 < self.interval_s <= 3600 or not 0 < self.refresh_s <= 86400 or not 0 < self.verify_every_s <= 86400:
            raise ConfigError(f"a mirror's round interval ({self.interval_s} s) must lie in (0, 3600], its selection "
                              f"refresh ({self.refresh_s} s) and verification interval ({self.verify_every_s} s) in "
                              "(0, 86400]")


def write_spec(manifest: Manifest, spec: MirrorSpec) -> MirrorSpec:
    """The run's mirror spec: `spec` the first time, the same again later; another selection for the
    same run is refused (a restarted mirror keeps what it mirrors)."""
    spec.check()
    try:
        manifest.write_once(SPEC, dataclasses.asdict(spec))
    except ManifestConflict as exc:
        raise ConfigError(f"run {manifest.run_id} mirrors {manifest.read(SPEC)} already, not {dataclasses.asdict(spec)}; "
                          "a run's mirror keeps its selection: start a new run id for another") from exc
    return spec


def read_spec(manifest: Manifest) -> MirrorSpec:
    stored = manifest.read(SPEC)
    if stored is None:
        raise ConfigError(f"the run manifest at {manifest.location} has no mirror spec; start the mirror with its "
                          "topic selection (kafka_dr_mirror's start task, or the job's --topics)")
    return MirrorSpec(**stored)


def request_stop(manifest: Manifest, why: str) -> None:
    """Ask the run's mirror to stop after its current round (idempotent: the first request stays)."""
    manifest.get_or_create(STOP, lambda: {"at": timeline.iso(time.time()), "why": why})


class Mirror:
    """One run's mirror from `source` to `target` (the DR cluster); `copy_round(units, own_ends)` copies
    the units and returns their result rows (kmigrate.run.copying.tasks.copy_task's; `own_ends`: where
    the mirror's own copies left each partition's end, so that records it wrote count as its own when
    the source's log start has moved past them); `verify_round(units,
    previous rows)`, every `spec.verify_every_s`, verifies what was mirrored since the last time while
    the source is live (kmigrate.run.copying.tasks.live_verify_task's rows)."""

    def __init__(self, manifest: Manifest, source: ClusterConfig, target: ClusterConfig, spec: MirrorSpec,
                 copy_round: Callable[[Sequence[WorkUnit], Mapping[Key, int]], list[dict[str, Any]]], *,
                 verify_round: Callable[[Sequence[WorkUnit], Mapping[Key, Any]], list[dict[str, Any]]] | None = None,
                 say: Callable[[str], None] = print) -> None:
        self.manifest, self.source, self.target, self.spec = manifest, source, target, spec
        self.copy_round, self.verify_round, self.say = copy_round, verify_round, say
        self.verified = {(r["topic"], r["partition"]): r for r in (manifest.read(VERIFIED) or {}).get("rows", [])}
        self.verified_at = time.monotonic()
        self.partitions: dict[str, int] = {}  # mirrored topic -> partitions
        self.group_names: list[str] = []
        self.refreshed = float("-inf")
        self.previous_start: float | None = None
        earlier = mirror_status.read(manifest) or {}  # a restarted mirror numbers and counts on
        self.rounds = earlier.get("round", 0)
        self.totals = {"records": 0, "rounds": 0, "failed_rounds": 0, **earlier.get("totals", {})}
        self.started = time.time()
        self.last_status: dict[str, Any] = earlier
        # where this run's mirror left each partition's end on the DR cluster (its copies' results only:
        # a DR topic's own records are never taken for the mirror's)
        self.own_ends: dict[Key, int] = {(p["topic"], p["partition"]): p["own_end"]
                                         for p in earlier.get("partitions", []) if p.get("own_end") is not None}
        # the copies asked for and not reported done: [the DR end when asked, the end asked for]
        self.asked: dict[Key, list[int]] = {(p["topic"], p["partition"]): p["asked"]
                                            for p in earlier.get("partitions", []) if p.get("asked")}

    def run(self, should_stop: Callable[[], bool] = lambda: False, max_seconds: float | None = None) -> int:
        """Rounds until a stop is requested (the manifest's STOP, `should_stop()`) or `max_seconds`
        passed; returns the number of the last round (the run's rounds, over its restarts)."""
        self.manifest.write_once(Part.attempt(STARTS), {"at": timeline.iso(self.started), "host": socket.gethostname(),
                                                        "pid": os.getpid()})
        deadline = None if max_seconds is None else time.monotonic() + max_seconds
        while True:
            began = time.monotonic()
            if self.stop_requested(should_stop) or (deadline is not None and began >= deadline):
                break
            try:
                self.round()
            except KmigrateError as exc:  # a cluster away, a topic deleted meanwhile: said, and the next round tries
                self.failed_round(exc)
            while time.monotonic() - began < self.spec.interval_s and not self.stop_requested(should_stop):
                time.sleep(min(0.05, self.spec.interval_s))
        mirror_status.write(self.manifest, self.last_status, stopped=True)
        return self.rounds

    def failed_round(self, exc: Exception) -> None:
        """A round that could not run: the selection read again before the next, the status saying why
        (its heartbeat goes on: starting the job again would not help)."""
        self.refreshed = float("-inf")
        self.totals["failed_rounds"] += 1
        self.say(f"round {self.rounds + 1} could not run: {exc}; trying again")
        now = time.time()
        base = self.last_status or mirror_status.of_round(self.rounds, now, now, None, {}, {}, {}, {}, [], self.totals)
        self.last_status = {**base, "heartbeat": timeline.iso(now), "error": str(exc)[:2000], "totals": dict(self.totals)}
        mirror_status.write(self.manifest, self.last_status)

    def stop_requested(self, should_stop: Callable[[], bool]) -> bool:
        return should_stop() or self.manifest.exists(STOP)

    def refresh(self) -> None:
        """The selection as the source has it now: new topics and partitions prepared on the DR
        cluster (created like the source's, changes applied to those the run created) and claimed."""
        with ClusterAdmin(self.source) as admin:
            topics = select(admin.list_topics(), self.spec.topics_include, self.spec.topics_exclude)
            counts = admin.partition_counts(topics) if topics else {}
            groups = select(admin.list_groups(), self.spec.groups, what="consumer group") if self.spec.groups else []
        counts = {t: n for t, n in counts.items() if n}
        if counts != self.partitions:
            new = sorted(set(counts) - set(self.partitions))
            grown = sorted(t for t in counts if t in self.partitions and counts[t] != self.partitions[t])
            if new:
                claim_topics(self.target, self.manifest.run_id, sorted(counts), dag=os.environ.get("AIRFLOW_CTX_DAG_ID"))
            units = [WorkUnit(t, p, 0) for t, n in sorted(counts.items()) for p in range(n)]
            prepare_targets(self.source, self.target, units, manifest=self.manifest)
            if self.partitions or new:
                self.say(f"mirroring {len(counts)} topics, {len(units)} partitions"
                         + (f"; new: {', '.join(new)}" if new and self.partitions else "")
                         + (f"; partitions added: {', '.join(grown)}" if grown else ""))
            self.partitions = counts
        self.group_names = groups
        self.refreshed = time.monotonic()

    def round(self) -> dict[str, Any]:
        """One round: copy what the source decided since the last, then the groups, then the status."""
        if time.monotonic() - self.refreshed >= self.spec.refresh_s:
            self.refresh()
        started = time.time()
        keys = [(t, p) for t, n in sorted(self.partitions.items()) for p in range(n)]
        source, target = ends(self.source, keys, stable=True), ends(self.target, keys, stable=False)
        behind = [WorkUnit(t, p, source[(t, p)][1]) for t, p in keys
                  if target[(t, p)][1] < source[(t, p)][1] or target[(t, p)][0] < source[(t, p)][0]]
        self.own_ends.update(self.written_unreported(target))
        for unit in behind:  # from where the first copy not reported done began, to the furthest end asked since
            key = (unit.topic, unit.partition)
            began, _ = self.asked.get(key, (target[key][1], 0))
            self.asked[key] = [began, max(unit.end_offset, self.asked.get(key, (0, 0))[1])]
        rows = self.copy_round(behind, dict(self.own_ends)) if behind else []
        for row in rows:
            if row["ok"]:
                self.own_ends[(row["topic"], row["partition"])] = row["target_end"]
                self.asked.pop((row["topic"], row["partition"]), None)
        failed = {(r["topic"], r["partition"]): r["error"] for r in rows if not r["ok"]}
        copied = sum(r["records"] for r in rows if r["ok"])
        moved = {(u.topic, u.partition) for u in behind} - set(failed)
        mirrored = {k: source[k][1] if k in moved else target[k][1] for k in keys}  # the DR cluster's ends now
        synced = group_sync.sync_groups(self.source, self.target, self.group_names, mirrored) if self.group_names else []
        if self.verify_round is not None and time.monotonic() - self.verified_at >= self.spec.verify_every_s:
            # in the round: beside the rounds (a Spark job of its own) it slowed every round it overlapped
            # on a 2-core machine (bench-dr: a record's p50 2.1 s -> 3.8 s)
            self.verified_at = time.monotonic()
            self.verify(mirrored)
        ended = time.time()
        self.rounds += 1
        self.totals["records"] += copied
        self.totals["rounds"] += 1
        self.totals["failed_rounds"] += bool(failed)
        self.last_status = mirror_status.of_round(
            self.rounds, started, ended, self.previous_start, source, target, mirrored, failed, synced, self.totals,
            self.own_ends, self.asked)
        self.previous_start = started
        mirror_status.write(self.manifest, self.last_status)
        if failed:
            self.say(f"round {self.rounds}: {len(failed)} partitions failed, retried next round: "
                     + "; ".join(f"{t}[{p}]: {e}" for (t, p), e in sorted(failed.items())))
        return self.last_status

    def written_unreported(self, target: Mapping[Key, tuple[int, int]]) -> dict[Key, int]:
        """The DR cluster's ends that copies of this mirror wrote without reporting it (a task killed
        after its writes, a driver killed while its Spark job went on): an end now above where a copy
        was asked to begin and at most one past what it was asked to write up to (a commit marker may
        follow the last record), which only that copy wrote (the partition's lease kept other copiers
        out, and the copy checked what lay below its start before it wrote). As `own_end` the copy after
        it takes those records for the mirror's own when the source's log start has moved past them."""
        return {k: target[k][1] for k, (began, end) in self.asked.items()
                if k in target and began < target[k][1] <= end + 1 and target[k][1] != self.own_ends.get(k)}

    def verify(self, mirrored: Mapping[Key, int]) -> None:
        """What was mirrored since the last verification, read on both sides while the source is live;
        the rows so far replace the part VERIFIED (a failover's window then reads only what came after).
        What fails is said, and the next verification reads it again."""
        units = [WorkUnit(t, p, end) for (t, p), end in sorted(mirrored.items())
                 if end > self.verified.get((t, p), {}).get("to", -1) or not self.verified[(t, p)].get("equal")]
        if not units:
            return
        try:
            rows = self.verify_round(units, dict(self.verified))
        except Exception as exc:  # noqa: BLE001 - the rounds go on; the next verification tries again
            self.say(f"verifying while live failed ({exc}); the next verification reads it again")
            return
        self.verified.update({(r["topic"], r["partition"]): r for r in rows})
        self.manifest.replace(VERIFIED, {"rows": [self.verified[k] for k in sorted(self.verified)],
                                         "round": self.rounds + 1, "at": timeline.iso(time.time())})
        unequal = [r for r in rows if not r["equal"]]
        if unequal:
            self.say(f"verified while live: {len(unequal)} partitions differ (a failover verifies them in full): "
                     + "; ".join(f"{r['topic']}[{r['partition']}]: {'; '.join(r['problems'])}" for r in unequal))


def ends(cluster: ClusterConfig, keys: Sequence[Key], *, stable: bool) -> dict[Key, tuple[int, int]]:
    """{partition: (log start, end)} of `keys` on `cluster`, in two ListOffsets rounds; `stable`: the
    end is the last stable offset (what a live source has decided)."""
    if not keys:
        return {}
    with shared_admin(cluster) as admin:
        starts = admin.start_offsets(keys, retry=True)
        last = admin.stable_ends(keys, retry=True) if stable else admin.end_offsets(keys, retry=True)
    return {k: (starts[k], last[k]) for k in keys}
