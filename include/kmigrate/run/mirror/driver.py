"""The mirror's driver (docs/DESIGN.md §12). Its copy runs in terms: tasks that each hold their
partitions' leases for the term and copy whatever the source decides as it comes
(kmigrate.run.mirror.task: the copier of §4 in its live mode, transactions whole, compaction
gaps and log start moves as on the source, each copy resuming from the DR cluster's end with its
checks). While a term runs, the driver reads, in one ListOffsets request a kind, every mirrored
partition's last stable offset on the source and end on the DR cluster, copies the selected
groups' committed offsets up to those ends (`groups.sync_groups`), and replaces the run's status
part (`status`): the heartbeat, and each partition's lag. The selection is read again every
`refresh_s`: a topic created on the source that matches it is created on the DR cluster and
mirrored from the next term on, partitions added and configs changed on the source are applied
(`prepare_targets`). A topic promoted on the DR cluster (kmigrate.run.mirror.producer_moves) is
copied no more from the next term on, which the driver begins as soon as a status finds the
promotion; each status then reads the promoted partitions' ends on the source, and names any
record written there since (split brain: never copied over what the DR cluster's producers write).
A mirror that renames (its spec's `renames`, a consolidation's) keeps each topic and group under its
name on the DR cluster; its own records (status, verifications, moves) name the source's.

Pure Python: a term's copy is handed in (`copy_term`), so the driver runs the same under a Spark job
(kmigrate_spark.mirror_job) and in a test."""
from __future__ import annotations

import functools
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from kmigrate.claims.runs import claim_topics
from kmigrate.config import ClusterConfig
from kmigrate.errors import ConfigError, KmigrateError, WrongCluster
from kmigrate.kafka import ends as kafka_ends
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.manifest import Manifest, Part
from kmigrate.model import WorkUnit
from kmigrate.run.checks import identity
from kmigrate.run.checks.selection import select
from kmigrate.run.copying.precopy import compacted_topics
from kmigrate.run.mirror import groups as group_sync
from kmigrate.run.mirror import reports
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror.connectors import ConnectorWatch
from kmigrate.run.mirror.spec import MirrorSpec
from kmigrate.run.mirror.task import copy_term_here, written_by_the_mirror
from kmigrate.run.mirror.term import STOP, TERM, Term
from kmigrate.run.records import timeline
from kmigrate.run.records.moves import moved_groups, promoted_topics
from kmigrate.run.targets.prepare import prepare_targets

Key = tuple[str, int]
# the keys two DR topic names must not share: the name, and the name of its metrics ('.' read as '_')
CLASHES = (lambda name: name, lambda name: name.replace(".", "_"))
STARTS = "mirror-starts"                   # attempts: one a start of the mirror job
# the mirrored ranges verified while the source is live, replaced as the mirror verifies more: named as
# an attempt of the live verification, so that a failover's window reads only what came after them
VERIFIED = f"{Part.LIVE_VERIFICATION}/mirror"


CopyTerm = Callable[[Sequence[WorkUnit], Mapping[Key, dict[str, Any]], Term], list[dict[str, Any]]]


def _admitted(selected: Iterable[str], kept: Mapping[str, str], check_one: Callable[[str], str],
              keys: Sequence[Callable[[str], str]], clash: Callable[[str, str, str], str]
              ) -> tuple[dict[str, str], dict[str, str]]:
    """What a mirror's renames admit of `selected` (topics or groups) when the whole selection is
    refused, in one pass: the `kept` ones ({name: its DR name}, admitted before), then each new one
    in order whose DR name the rule's checks of it alone accept (`check_one`) and none of whose forms
    (`keys`: the DR name, its metric name) is taken already. (admitted {name: DR name}, refused {name:
    why}; `clash(DR name, the other, the other's DR name)` says why for a clash)."""
    names, refused = dict(kept), {}
    taken = {key(n): name for name, n in names.items() for key in keys}
    for name in sorted(set(selected) - set(names)):
        try:
            there = check_one(name)
        except ConfigError as exc:
            refused[name] = str(exc)
            continue
        other = next((taken[key(there)] for key in keys if key(there) in taken), None)
        if other is not None:
            refused[name] = clash(there, other, names[other])
            continue
        names[name] = there
        taken.update({key(there): name for key in keys})
    return names, refused


class Mirror:
    """One run's mirror from `source` to `target` (the DR cluster). Its copy goes in terms: `copy_term(units,
    extras, term)` copies the units for the term and returns a row each (kmigrate.run.mirror.task's;
    `extras`: each unit's own_end, previous verification and compaction); by default in this process,
    under the Spark job as a Spark job of long-running tasks. While a term runs, every `interval_s` the
    mirror reads both sides' ends, copies the groups' offsets up to the DR cluster's ends, and replaces
    its status; every `refresh_s` it reads the selection again (a change ends the term: the next one
    copies the new partitions). `cancel()`, when given, stops a term's tasks that did not end
    `CANCEL_AFTER_S` after being told to (executors that cannot read the run manifest)."""

    CANCEL_AFTER_S = 30.0
    REPORTS_EVERY_S = 5.0  # the running term's reports read this often
    BACKOFF_MAX_S = 4.0  # terms that keep failing whole wait up to this between them (under any heartbeat limit)

    def __init__(self, manifest: Manifest, source: ClusterConfig, target: ClusterConfig, spec: MirrorSpec,
                 copy_term: CopyTerm | None = None, *, cancel: Callable[[], None] | None = None,
                 connectors: ConnectorWatch | None = None, say: Callable[[str], None] = print) -> None:
        self.manifest, self.source, self.target, self.spec = manifest, source, target, spec
        self.connectors = connectors
        self.copy_term = copy_term or functools.partial(copy_term_here, (source, target))
        self.cancel, self.say = cancel, say
        self.verified = {(r["topic"], r["partition"]): r for r in (manifest.read(VERIFIED) or {}).get("rows", [])}
        self.partitions: dict[str, int] = {}  # mirrored topic -> partitions
        self.names: dict[str, str] = {}  # mirrored topic -> its name on the DR cluster (the spec's renames)
        self.group_ids: dict[str, str] = {}  # mirrored group -> its id on the DR cluster
        self.refused: dict[str, str] = {}  # topics selected whose DR name the renames refuse: why, as said
        self.refused_groups: dict[str, str] = {}  # groups selected whose DR id the renames refuse: why, as said
        self.compacted: frozenset[str] = frozenset()
        self.group_names: list[str] = []
        self.refreshed = float("-inf")
        self.lag = mirror_status.Lag()
        self.errors: dict[Key, str] = {}  # the last term's, by partition
        self.failing = 0  # terms in a row that ended without a partition copied (their Spark job failed)
        self.away = False  # the last reading failed (a cluster away): the next checks first that both listen
        self.clusters: dict[str, Any] | None = None  # the run's clusters' ids, checked once (`refresh`)
        earlier = mirror_status.read(manifest) or {}  # a restarted mirror numbers and counts on
        # terms numbered on past any a killed driver began (its tasks' reports name theirs)
        self.rounds = earlier.get("round", 0)
        self.terms = max(earlier.get("term") or 0, (manifest.read(TERM) or {}).get("term") or 0)
        self.totals = {"records": 0, "in_step": 0, "joined": 0, "offsets": 0, "rounds": 0, "terms": 0, "failed_rounds": 0,
                       **earlier.get("totals", {})}
        self.started = time.time()
        self.last_status: dict[str, Any] = earlier
        # where this run's mirror left each partition's end on the DR cluster (its copies' results only:
        # a DR topic's own records are never taken for the mirror's)
        self.own_ends: dict[Key, int] = {(p["topic"], p["partition"]): p["own_end"]
                                         for p in earlier.get("partitions", []) if p.get("own_end") is not None}
        # the copies asked for and not reported done: [the DR end when asked, the source's end since]
        self.asked: dict[Key, list[int]] = {(p["topic"], p["partition"]): p["asked"]
                                            for p in earlier.get("partitions", []) if p.get("asked")}
        self.dr_seen: dict[Key, int] = {(p["topic"], p["partition"]): p["dr_end"] for p in earlier.get("partitions", [])}
        # the promoted topics, each with the first term that copies it no more (a restarted mirror: none does)
        self.promoted: dict[str, int] = dict.fromkeys(promoted_topics(manifest), 0)
        self.promotions_changed = False  # a status found a topic promoted (or one promoted no more): the term ends
        self.split_said: dict[Key, int] = {}  # the records written on the source to a promoted partition, as said

    def run(self, should_stop: Callable[[], bool] = lambda: False, max_seconds: float | None = None) -> int:
        """Terms until a stop is requested (the manifest's STOP, `should_stop()`) or `max_seconds`
        passed; returns the number of the last status (the run's, over its restarts)."""
        self.manifest.write_once(Part.attempt(STARTS), {"at": timeline.iso(self.started), "host": socket.gethostname(),
                                                        "pid": os.getpid()})
        # a driver killed leaves its term's tasks running on the executors (holding their task slots and
        # leases) until the term's end: told to end now
        self.manifest.replace(TERM, {"term": self.terms, "ended": True})
        deadline = float("inf") if max_seconds is None else time.monotonic() + max_seconds
        stop = lambda: self.stop_requested(should_stop) or time.monotonic() >= deadline  # noqa: E731
        while not stop():
            began = time.monotonic()
            try:
                self.term(stop)
            except WrongCluster:  # a connection to another cluster than the run's: no term will help
                raise
            except KmigrateError as exc:  # a cluster away, a topic deleted meanwhile: said, and the next term tries
                self.failed_round(exc)
            while time.monotonic() - began < self.pause() and not stop():
                time.sleep(min(0.05, self.spec.interval_s))
        mirror_status.write(self.manifest, self.last_status, stopped=True)
        return self.rounds

    def pause(self) -> float:
        """Between two terms: the status interval; after the second failed term in a row, twice the
        last pause, up to BACKOFF_MAX_S (a Spark Connect server away fails each term at once: the first
        is tried again at once, for the session a restarted server lost is renewed by the next term)."""
        if self.failing < 2:
            return self.spec.interval_s
        return max(self.spec.interval_s, min(self.BACKOFF_MAX_S, self.spec.interval_s * 2 ** (self.failing - 1)))

    def round(self) -> dict[str, Any]:
        """One pass: each partition copied up to the source's last stable offset when it began, what
        it copied verified, then the groups and the status (a term `once`)."""
        return self.term(lambda: True, once=True)

    def failed_round(self, exc: Exception) -> None:
        """A term that could not run: the selection read again before the next, the status saying why
        (its heartbeat goes on: starting the job again would not help)."""
        self.refreshed, self.away = float("-inf"), True
        self.totals["failed_rounds"] += 1
        self.say(f"the mirror could not run: {exc}; trying again")
        now = time.time()
        base = self.last_status or mirror_status.of_round(self.rounds, now, now, {}, {}, {}, [], self.totals)
        self.last_status = {**base, "heartbeat": timeline.iso(now), "error": str(exc)[:2000], "totals": dict(self.totals)}
        mirror_status.write(self.manifest, self.last_status)

    def beat(self) -> None:
        """The last status again with a new heartbeat (nothing read)."""
        self.last_status = {**self.last_status, "heartbeat": timeline.iso(time.time())}
        mirror_status.write(self.manifest, self.last_status)

    def stop_requested(self, should_stop: Callable[[], bool]) -> bool:
        return should_stop() or self.manifest.exists(STOP)

    def refresh(self) -> bool:
        """The selection as the source has it now: new topics and partitions prepared on the DR
        cluster (created like the source's, changes applied to those the run created) and claimed.
        Whether the mirrored partitions changed. First, once a driver: the clusters it mirrors between,
        recorded at the mirror's first start and held to that later (WrongCluster: a driver started
        on other clusters writes nothing; a failover and a failback are held to them too)."""
        if self.clusters is None:
            self.clusters = identity.begin(self.manifest, self.source, self.target, what="mirror")
        with ClusterAdmin(self.source) as admin:
            topics = select(admin.list_topics(), self.spec.topics_include, self.spec.topics_exclude)
            counts = admin.partition_counts(topics) if topics else {}
            groups = select(admin.list_groups(), self.spec.groups, what="consumer group") if self.spec.groups else []
        counts = {t: n for t, n in counts.items() if n}
        names = self.dr_names(counts)
        counts = {t: n for t, n in counts.items() if t in names}
        changed = counts != self.partitions
        if changed:
            new = sorted(set(counts) - set(self.partitions))
            grown = sorted(t for t in counts if t in self.partitions and counts[t] != self.partitions[t])
            if new:
                claim_topics(self.target, self.manifest.run_id, sorted(names[t] for t in counts),
                             dag=os.environ.get("AIRFLOW_CTX_DAG_ID"), deployment=self.manifest.state_location,
                             source_id=self.clusters["source"]["cluster_id"])
            units = [WorkUnit(t, p, 0, target_topic=names[t]) for t, n in sorted(counts.items())
                     if t not in self.promoted for p in range(n)]
            prepare_targets(self.source, self.target, units, manifest=self.manifest)
            if self.partitions or new:
                self.say(f"mirroring {len(counts)} topics, {len(units)} partitions"
                         + (f"; new: {', '.join(new)}" if new and self.partitions else "")
                         + (f"; partitions added: {', '.join(grown)}" if grown else ""))
            self.partitions, self.names = counts, {t: names[t] for t in counts}
            self.compacted = compacted_topics(self.source, set(counts)) if counts else frozenset()
        # each group's id on the DR cluster; a group whose id the renames refuse is left out, never synced under its own
        self.group_ids = self.dr_group_ids(groups)
        self.group_names = [g for g in groups if g in self.group_ids] if self.spec.renames else groups
        self.refreshed = time.monotonic()
        return changed

    def dr_names(self, topics: Mapping[str, int]) -> dict[str, str]:
        """Each selected topic's name on the DR cluster (the spec's renames; none: its own), but for
        topics the renames refuse (a name Kafka does not take, two onto one, a clash with another's):
        those are left out, each said once with why, and the others mirrored."""
        rule = self.spec.renames
        if not rule:
            return {t: t for t in topics}
        try:
            names, refused = rule.only(set(topics), ()).check_topics(topics), {}
        except ConfigError:  # the topics mirrored already kept, each new one taken if it fits beside them
            names, refused = _admitted(
                topics, {t: n for t, n in self.names.items() if t in topics},
                lambda topic: rule.only({topic}, ()).check_topics([topic])[topic], CLASHES,  # its metric name too
                lambda name, other, theirs: (f"its name on the DR cluster, {name}, is {theirs}'s, {other}'s there, or "
                                             "clashes with it once '.' is read as '_'"))
        self._say_left_out("", refused, self.refused)
        self.refused = refused
        return names

    def dr_group_ids(self, groups: Sequence[str]) -> dict[str, str]:
        """Each selected consumer group's id on the DR cluster under the spec's renames ({} without
        renames: each keeps its own), but for groups the renames refuse (an empty id, two onto one):
        those are left out, each said once with why, the groups synced already keeping their ids."""
        rule = self.spec.renames
        if not rule:
            return {}
        try:
            ids, refused = rule.only((), groups).check_groups(groups), {}
        except ConfigError:  # the groups synced already kept, each new one taken if its id is free
            ids, refused = _admitted(
                groups, {g: i for g, i in self.group_ids.items() if g in groups},
                lambda group: rule.only((), [group]).check_groups([group])[group], CLASHES[:1],
                lambda gid, other, _: f"its id on the DR cluster, {gid}, is {other}'s there")
        self._say_left_out("consumer group ", refused, self.refused_groups)
        self.refused_groups = refused
        return ids

    def _say_left_out(self, what: str, refused: Mapping[str, str], before: Mapping[str, str]) -> None:
        """Each of `refused` not said `before` with the same reason, said once."""
        for name, why in sorted(refused.items()):
            if before.get(name) != why:
                self.say(f"not mirrored: {what}{name} ({why})")

    def left_out(self) -> dict[str, dict[str, str]]:
        """The topics and groups selected that the renames refuse (the status's `not_mirrored`): why, each."""
        return {"topics": dict(self.refused), "groups": dict(self.refused_groups)}

    def keys(self) -> list[Key]:
        """The partitions this mirror copies: the selection's, but the promoted topics'."""
        return [(t, p) for t, n in sorted(self.partitions.items()) if t not in self.promoted for p in range(n)]

    def term(self, stop: Callable[[], bool], *, once: bool = False) -> dict[str, Any]:
        """A term of the copy (`once`: one pass, in this thread), statuses while it runs, then its rows
        taken in: where the mirror's copies left each partition, what they verified."""
        if time.monotonic() - self.refreshed >= self.spec.refresh_s:
            self.refresh()
        self.promotions_changed = False
        keys = self.keys()
        source = mirror_status.ends(self.source, keys, stable=True, away=self.away)
        dr = mirror_status.ends(self.target, keys, stable=False, away=self.away, names=self.names)
        for key in keys:  # what a copy of this term may write: from the DR end now up to what the source holds
            began, end = self.asked.get(key, (dr[key][1], 0))
            self.asked[key] = [began, max(end, source[key][1])]
        self.own_ends.update(self.written_unreported(dr))
        self.dr_seen = {k: dr[k][1] for k in keys} | self.dr_seen
        self.terms += 1
        term = Term(self.terms, self.manifest.run_id, self.spec.term_s, self.manifest.state_location, once=once,
                    verify_every_s=self.spec.verify_every_s)
        self.manifest.replace(TERM, {"term": term.number, "ended": False})
        units = [WorkUnit(t, p, source[(t, p)][1], target_topic=self.names.get(t, t)) for t, p in keys]
        extras = {k: {"own_end": self.own_ends.get(k), "previous": self.verified.get(k) if
                      self.verified.get(k, {}).get("equal") else None, "compacted": k[0] in self.compacted,
                      "began": self.asked[k][0]} for k in keys}
        if once:
            self.taken_in(self.copy_term(units, extras, term) if units else [])
            return self.status(keys, term.number)
        result: dict[str, Any] = {}

        def copy() -> None:
            try:
                result["rows"] = self.copy_term(units, extras, term) if units else []
            except Exception as exc:  # noqa: BLE001 - said below; the next term copies them again
                result["error"] = exc

        thread = threading.Thread(target=copy, name=f"mirror-term-{term.number}", daemon=True)
        thread.start()
        told, read_reports_at = None, time.monotonic() + self.REPORTS_EVERY_S
        while thread.is_alive():
            thread.join(self.spec.interval_s)
            if not thread.is_alive():
                break
            if time.monotonic() >= read_reports_at:
                read_reports_at = time.monotonic() + self.REPORTS_EVERY_S
                self.reported(term.number)
            if told is None and stop():
                self.manifest.replace(TERM, {"term": term.number, "ended": True})
                told = time.monotonic()
            changed = False
            if told is not None and self.away:  # told to end, a cluster away: the heartbeat only until the
                self.beat()                      # tasks end (each reading would wait its timeout, a stop with it)
            else:
                try:  # a cluster away: said, the heartbeat goes on, and the tasks end with the term
                    self.status(keys, term.number)
                    changed = told is None and (self.promotions_changed or time.monotonic() - self.refreshed
                                                >= self.spec.refresh_s and self.refresh())
                except KmigrateError as exc:
                    self.failed_round(exc)
            if told is None and (stop() or changed):
                self.manifest.replace(TERM, {"term": term.number, "ended": True})
                told = time.monotonic()
            elif told is not None and self.cancel is not None and time.monotonic() - told > self.CANCEL_AFTER_S:
                self.say(f"term {term.number}: its tasks did not end {self.CANCEL_AFTER_S:g}s after being told to; "
                         "cancelling them (their copies resume from the DR ends)")
                self.cancel()
                told = float("inf")
        if "error" in result:
            self.say(f"term {term.number} ended without its rows ({result['error']}); its partitions are copied "
                     "again from the DR cluster's ends")
        rows = result.get("rows", [])
        self.failing = self.failing + 1 if "error" in result or (rows and not any(r["ok"] for r in rows)) else 0
        self.taken_in(rows)
        return self.last_status if told is not None and self.away else self.status(keys, term.number)

    def reported(self, term: int) -> None:
        """What the running term's tasks reported so far (`reports`): each partition's own end, its
        error and its last verification, as `taken_in` takes them at the term's end (the copies asked
        for stay asked until then)."""
        try:
            rows = reports.read(self.manifest, term)
        except KmigrateError as exc:  # read again at the next
            self.say(f"the tasks' reports could not be read ({exc})")
            return
        self.errors = {(r["topic"], r["partition"]): r["error"] for r in rows if r["error"]}
        self.own_ends.update({(r["topic"], r["partition"]): r["own_end"] for r in rows if r["own_end"] is not None})
        self.take_verified(rows)

    def taken_in(self, rows: Sequence[dict[str, Any]]) -> None:
        """A term's rows: each partition's own end, its error, its last verification (the part VERIFIED
        replaced: a failover's window reads only what came after)."""
        self.errors = {(r["topic"], r["partition"]): r["error"] for r in rows if r["error"]}
        for row in rows:
            key = (row["topic"], row["partition"])
            if row["own_end"] is not None:
                self.own_ends[key] = row["own_end"]
            if row["ok"]:
                self.asked.pop(key, None)
            self.totals["records"] += row["records"]
            self.totals["in_step"] += row.get("in_step", 0)
            self.totals["joined"] += row.get("joined", 0)
        self.totals["terms"] += 1
        self.totals["failed_rounds"] += bool(self.errors)
        if self.errors:
            self.say(f"term {self.terms}: {len(self.errors)} partitions failed, tried again: "
                     + "; ".join(f"{t}[{p}]: {e}" for (t, p), e in sorted(self.errors.items())))
        self.take_verified(rows)

    def take_verified(self, rows: Sequence[dict[str, Any]]) -> None:
        """The rows' verifications that are new, the part VERIFIED replaced with them (a failover's
        window reads only what came after), and those that found a difference said."""
        new = [r["verified"] for r in rows if r.get("verified")
               and r["verified"] != self.verified.get((r["topic"], r["partition"]))]
        if not new:
            return
        self.verified.update({(r["topic"], r["partition"]): r for r in new})
        self.manifest.replace(VERIFIED, {"rows": [self.verified[k] for k in sorted(self.verified)],
                                         "term": self.terms, "at": timeline.iso(time.time())})
        unequal = [r for r in new if not r["equal"]]
        if unequal:
            self.say(f"verified while live: {len(unequal)} partitions differ (a failover verifies them in full): "
                     + "; ".join(f"{r['topic']}[{r['partition']}]: {'; '.join(r['problems'])}" for r in unequal))

    def status(self, keys: Sequence[Key], term: int | None = None) -> dict[str, Any]:
        """Both sides' ends read now (after a failed reading, with `away`), the groups' offsets copied
        up to the DR ends, the status replaced."""
        started = time.time()
        source = mirror_status.ends(self.source, keys, stable=True, away=self.away)
        dr = mirror_status.ends(self.target, keys, stable=False, away=self.away, names=self.names)
        self.away = False
        self.lag.note(started, {k: v[1] for k, v in source.items()})
        for key in keys:
            if key in self.asked:
                self.asked[key][1] = max(self.asked[key][1], source[key][1])
        mirrored = {k: v[1] for k, v in dr.items()}
        # how far the DR ends moved, whoever's copy moved them (a killed driver's tasks report nothing)
        self.totals["offsets"] += sum(max(0, end - self.dr_seen.get(k, end)) for k, end in mirrored.items())
        self.dr_seen.update(mirrored)
        # a group whose move onto the DR cluster began is synced no more (its move writes its offsets there);
        # the moves' parts listed once a round, for the groups and the promotions
        parts = self.manifest.parts()
        moved = moved_groups(self.manifest, parts)
        groups = [g for g in self.group_names if g not in moved]
        synced = group_sync.sync_groups(self.source, self.target, groups, mirrored, group_ids=self.group_ids,
                                        names=self.names) if groups else []
        # the moved groups named as such: whether each move ended, and when
        synced += [{"group": g, "moved": r.get("state"), "at": r.get("ended") or r.get("began")} for g, r in sorted(moved.items())]
        promoted = self.promotions(parts)
        ended = time.time()
        self.rounds += 1
        self.totals["rounds"] += 1
        self.last_status = {**mirror_status.of_round(
            self.rounds, started, ended, source, dr, self.errors, synced, self.totals,
            {k: self.lag.behind_s(ended, k, dr[k][1]) for k in keys}, self.own_ends, self.asked, term, self.names),
            "promoted": promoted, "not_mirrored": self.left_out()}
        mirror_status.write(self.manifest, self.last_status)
        if self.connectors is not None:
            self.connectors.tick(keys, self.names)
        return self.last_status

    def promotions(self, parts: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """The promoted topics as the manifest has them now (a change: `promotions_changed`, the term
        ends), each with the first term that copies it no more and its split brain: the records
        written on the source to each of its partitions since its promotion (the source's end past
        the end promoted), each said once as it grows. `parts`: the manifest's, listed this round."""
        promoted = promoted_topics(self.manifest, parts)
        if set(promoted) != set(self.promoted):
            self.promoted = {t: self.promoted.get(t, self.terms + 1) for t in promoted}
            self.promotions_changed = True
        keys = [(t, int(p)) for t, r in sorted(promoted.items()) for p in r.get("ends", {})]
        (high,) = kafka_ends.read(self.source, keys, (kafka_ends.HIGH,), mirror_status.STATUS_TIMEOUT_S,
                                  retry=True) if keys else ({},)
        rows = []
        for topic, record in sorted(promoted.items()):
            split = [{"partition": p, "records": high[(topic, p)] - end, "first_offset": end}
                     for p, end in sorted((int(p), e) for p, e in record.get("ends", {}).items()) if high[(topic, p)] > end]
            for row in split:
                key = (topic, row["partition"])
                if row["records"] > self.split_said.get(key, 0):
                    self.split_said[key] = row["records"]
                    self.say(f"split brain: {row['records']} records written on the source to promoted {topic}[{key[1]}] "
                             f"from offset {row['first_offset']} on; not copied (the DR cluster's producers write "
                             "there); stop the source's writer, and read them there if they matter")
            rows.append({"topic": topic, "partitions": len(record.get("ends", {})), "at": record.get("promoted_at"),
                         "ended": record.get("ended"), "from_term": self.promoted.get(topic), "split_brain": split})
        return rows

    def written_unreported(self, target: Mapping[Key, tuple[int, int]]) -> dict[Key, int]:
        """The DR cluster's ends that copies of this mirror wrote without reporting it (a task killed
        after its writes, a driver killed while its Spark job went on): an end now above where a copy
        was asked to begin and at most one past what the source held since (a commit marker may
        follow the last record), which only that copy wrote (the partition's lease kept other copiers
        out, and the copy checked what lay below its start before it wrote). As `own_end` the copy after
        it takes those records for the mirror's own when the source's log start has moved past them."""
        return {k: target[k][1] for k, (began, end) in self.asked.items()
                if k in target and written_by_the_mirror(began, target[k][1], end)
                and target[k][1] != self.own_ends.get(k)}

