"""The mirror's copy on an executor (docs/DESIGN.md §12): one Spark task copies its partitions
for a term (`term`), holding their leases the whole time, instead of copying them once and
ending. It reads the log starts and last stable offsets on the source and the ends on the DR cluster of its
partitions not being copied (one ListOffsets request a kind and cluster, at most every
`READ_EVERY_S`), and starts a copy of each partition behind (`COPIES_AT_ONCE` threads) with the
copier of §4 in its live mode (transactions whole, compaction gaps and log start moves as on the
source; every resume check, which a copy continuing where the task's last one committed skips, as
nothing was written there since). A partition is read and copied again as soon as its copy is done:
none waits for the copies of the others (a transactional partition's markers, a compacted one's
record path). It pauses `poll_s` only when nothing was behind. A partition whose last copy wrote
whole batches only is followed in step with the source instead (`stream`) until something a copy
must handle comes. Every `verify_every_s` it verifies what it copied while the source is live, one
partition at a time beside the copies.

When its term ends (`term`: its deadline, a stop, the driver ending it) the task returns a row a
partition. A term `once` makes one round (each partition copied up to the source's last stable
offset when it began). A partition that fails is named in its row and tried again after a pause
that doubles, up to `MAX_PAUSE_S`; the others go on. Pure Python."""
from __future__ import annotations

import collections
import dataclasses
import gc
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from kmigrate.claims import leases
from kmigrate.claims.leases import PartitionLease
from kmigrate.config import ClusterConfig
from kmigrate.copy.partition import copy_partition
from kmigrate.copy.writer import CopyOptions
from kmigrate.errors import KmigrateError, PartitionHeld
from kmigrate.kafka import ends, leaders
from kmigrate.kafka.pool import shared_admin
from kmigrate.model import WorkUnit
from kmigrate.run.mirror.reports import reporter
from kmigrate.run.mirror.stream import Streams
from kmigrate.run.mirror.term import Ended, Term, TermEnded
from kmigrate.run.verify.partition import verify_live

log = logging.getLogger(__name__)

Key = tuple[str, int]
MAX_PAUSE_S = 10.0
RETRY_FOR_S = 10.0  # a copy's resumes after errors that pass; the term goes on with the others meanwhile
# a task's partitions behind copied side by side: a copy waits on the clusters most of its time (a
# fetch, a produce), so one after another each partition waited for the sum of the others' copies
COPIES_AT_ONCE = 8
READ_EVERY_S = 0.01  # the ends of the partitions not being copied read at most this often
IN_STEP = True  # partitions followed in step with the source once their copies allow (`in_step`); else copied only
OFFSETS_TIMEOUT_S = 3.0  # a read of the ends (ms when answered): a source gone fails it, and lets a stop be seen, by then


@dataclasses.dataclass
class _Partition:
    unit: WorkUnit
    own_end: int | None
    previous: Mapping[str, Any] | None = None  # its last equal verification while live
    compacted: bool = False
    began: int | None = None  # the DR end when the driver asked the mirror's copies to begin (its `asked`)
    records: int = 0
    in_step: int = 0  # of `records`, those written in step with the source (`stream.Streams`)
    copies: int = 0
    error: str | None = None
    failures: int = 0
    pause_until: float = 0.0
    verified_to: int = -1
    committed: int | None = None  # the DR end this task's last copy left, committed
    checked: Mapping[str, Any] | None = None   # its last verification's row, equal or not
    producer: list[Any] = dataclasses.field(default_factory=list)  # CopyOptions.raw_producer, kept across copies
    whole_only: bool = False  # its last copy wrote whole batches only (CopyOptions.eager_producer off)
    source_start: int | None = None  # the source's log start its last copy aligned the DR log start to
    batch_limit: int | None = None  # the DR topic's max.message.bytes as its last copy read it
    joined: int = 0  # of the batches written in step, those joined into a larger one (`merge.join`)
    wrote_at: float = 0.0  # when a copy or a write in step last wrote records (monotonic; `stream.quiet`)

    def row(self) -> dict[str, Any]:
        return {"ok": self.error is None, "topic": self.unit.topic, "partition": self.unit.partition,
                "records": self.records, "in_step": self.in_step, "joined": self.joined, "copies": self.copies,
                "own_end": self.own_end, "error": self.error, "verified": self.checked}


def mirror_task(unit: WorkUnit, **keywords: Any) -> dict[str, Any]:
    """mirror_bin of one unit (its extras in `keywords`)."""
    extras = {k: keywords.pop(k) for k in ("own_end", "previous", "compacted", "began") if k in keywords}
    return mirror_bin([(unit, extras)], **keywords)[0]


def mirror_bin(items: Sequence[tuple[WorkUnit, Mapping[str, Any]]], clients: tuple[ClusterConfig, ClusterConfig],
               term: Term | Mapping[str, Any], fetch_max_bytes: int | None = None) -> list[dict[str, Any]]:
    """Copy the units of one Spark task for `term` (its extras: `own_end`, where the mirror's own
    copies left the partition's DR end; `previous`, its last verification row; `compacted`); a row
    each, in order."""
    term = term if isinstance(term, Term) else Term(**term)
    source, target = clients
    partitions = {(u.topic, u.partition): _Partition(u, extras.get("own_end"), extras.get("previous"),
                                                  bool(extras.get("compacted")), extras.get("began"))
                for u, extras in items}
    keys = list(partitions)

    def term_goes_on() -> None:  # checked before each write and each resumed attempt of a copy
        if ended() and not term.once:
            raise TermEnded("the mirror's term has ended (a stop, or a new term): no more writes from this task")

    options = CopyOptions(run_id=term.run_id, verify=False, live=True, retry_for_s=RETRY_FOR_S, guard=term_goes_on,
                          idle_timeout_s=RETRY_FOR_S,
                          **({"fetch_max_bytes": fetch_max_bytes} if fetch_max_bytes else {}))
    # the DR partitions' leases, as every copier of the DR cluster takes them: under their names there
    held = {k: PartitionLease(target, term.run_id, *p.unit.target_key, options.lease_s) for k, p in partitions.items()}
    copies = ThreadPoolExecutor(min(COPIES_AT_ONCE, len(keys)), "mirror-copy") if len(keys) > 1 else None
    # what the process holds as the term begins (a Spark Python worker's imports: about 100,000 objects) is
    # left out of the collector's full passes, which took 50-85 ms each with the GIL held, a stall of every
    # partition the task copies, twice a minute
    gc.freeze()
    ended = Ended(term)  # its thread ends with the term (the finally below)
    try:
        try:
            leases.acquire_all(list(held.values()))
            leaders.remember(source, keys)
            leaders.remember(target, [p.unit.target_key for p in partitions.values()])
        except KmigrateError as exc:  # each copy takes its lease on its own
            log.info("mirror: taking the term's leases at once failed (%s)", exc)
        if term.once:  # a round: each partition behind copied up to the source's last stable offset now
            wait_all([_start(copies, _copy, source, target, partitions[key], held[key], copy_options, lambda: False)
                      for key, copy_options in _behind(source, target, partitions, keys, options).items()])
            if term.verify_every_s is not None:
                _verify(source, target, partitions.values())
        else:
            _run_term(source, target, partitions, held, options, term, ended, copies)
    finally:
        gc.unfreeze()
        ended.close()
        if copies is not None:
            copies.shutdown(wait=True)
        leases.release_all(list(held.values()))
        leaders.forget(source, keys)
        leaders.forget(target, [p.unit.target_key for p in partitions.values()])
    return [partitions[(u.topic, u.partition)].row() for u, _ in items]


mirror_task.per_bin = mirror_bin  # type: ignore[attr-defined] - adapters.run_bin hands it a task's units


def _run_term(source: ClusterConfig, target: ClusterConfig, partitions: dict[Key, _Partition],
            held: Mapping[Key, PartitionLease], options: CopyOptions, term: Term, ended: Callable[[], bool],
            copies: ThreadPoolExecutor | None) -> None:
    """The term's copies until it ends: each partition copied again as soon as its last copy is done
    and the source has more (no partition waits for the others' copies), or followed in step with
    the source (`stream.Streams`) once its last copy wrote whole batches only; the ends of the
    partitions not being copied read together, at most every READ_EVERY_S; when due, one
    verification at a time on a thread of its own, of a partition not being copied or followed in
    step (what that one writes meanwhile lies past the end verified)."""
    deadline = time.monotonic() + term.seconds
    verify_at = time.monotonic() + (term.verify_every_s or float("inf"))
    due: list[_Partition] = []  # partitions whose verification is due
    running: dict[Key, Future[int]] = {}
    in_stream: set[Key] = set()  # of `running`, those followed in step
    # kept as the partitions start and end, not found by scanning them: a task copies thousands, and a
    # turn of this loop that went over all of them held the GIL from the partitions followed in step
    resting = dict.fromkeys(partitions)  # not in `running` (an ordered set)
    finished: collections.deque[Key] = collections.deque()  # of `running`, those done, told by their futures
    streams = Streams(source, target, options.may_write)
    verifier = ThreadPoolExecutor(1, "mirror-verify")
    verifying: Future[None] | None = None
    spacing = verify_next = 0.0
    report_at = verify_at  # a report at least every verify_every_s
    report = reporter(term.state_location, term.run_id, term.number, partitions)
    done = threading.Event()

    def started(key: Key, future: Future[int], streamed: bool = False) -> None:
        running[key] = future
        resting.pop(key, None)
        if streamed:
            in_stream.add(key)

        def ended_now(_: Future[int]) -> None:
            finished.append(key)
            done.set()
        future.add_done_callback(ended_now)

    try:
        while not ended() and time.monotonic() < deadline:
            while finished:
                key = finished.popleft()
                in_stream.discard(key)
                resting[key] = None
                running.pop(key).result()  # a copy's own failures are its partition's row; anything else is raised
            if verifying is not None and verifying.done():
                verifying, _ = None, verifying.result()
                if not due:  # a round of verification done: reported at once
                    report_at = _reported(report, term)
            if not due and time.monotonic() >= verify_at:
                report_at = _reported(report, term)  # also when nothing was verified (an error, say)
                due = [f for f in partitions.values() if f.own_end is not None and f.own_end != f.verified_to]
                verify_at = time.monotonic() + term.verify_every_s
                spacing = term.verify_every_s / 2 / max(1, len(due))  # the round spread over half the interval
            elif time.monotonic() >= report_at:  # a round of thousands of partitions lasts longer than the interval
                report_at = _reported(report, term)
            # one partition at a time, beside the copies: one not being copied, or followed in step (what it
            # writes lies past the end verified); paced, as a round's reads at once slowed both clusters
            if due and verifying is None and time.monotonic() >= verify_next:
                ready = next((f for f in due if (key := (f.unit.topic, f.unit.partition)) not in running
                              or key in in_stream), None)
                if ready is not None:
                    due.remove(ready)
                    verifying = verifier.submit(_verify, source, target, [ready])
                    verify_next = time.monotonic() + spacing
            now = time.monotonic()
            idle = []
            for key in [k for k in resting if partitions[k].pause_until <= now]:
                if in_step(partitions[key]):
                    started(key, streams.add(partitions[key], held[key]), streamed=True)
                else:
                    idle.append(key)
            read_at = now
            for key, copy_options in (_behind(source, target, partitions, idle, options) if idle else {}).items():
                started(key, _start(copies, _copy, source, target, partitions[key], held[key], copy_options, ended))
            if running:  # until a copy is done (one event, not a waiter on each of a dozen futures a turn)
                done.wait(term.poll_s)
                done.clear()  # one done meanwhile is in `finished`
                time.sleep(max(0.0, read_at + READ_EVERY_S - time.monotonic()))
            else:
                time.sleep(term.poll_s)
    finally:
        streams.close()
        # a verification under way is not waited for: read-only, and it can wait long on a source gone
        # (an unplanned failover waits for the term to end); its partition is verified in the next term
        verifier.shutdown(wait=False, cancel_futures=True)
        wait_all(running.values())


def _reported(report: Callable[[], None], term: Term) -> float:
    """`report()` made; when the next is due at the latest."""
    report()
    return time.monotonic() + (term.verify_every_s or float("inf"))


def in_step(f: _Partition) -> bool:
    """Whether a partition is followed in step with the source: its last copy wrote whole batches
    only (or nothing) and left the DR end committed, and nothing failed since. Its raw producer is
    kept from that copy, or taken when it first writes in step."""
    return IN_STEP and f.whole_only and f.committed is not None and f.source_start is not None and f.error is None


def wait_all(running: Iterable[Future[int]]) -> None:
    for copy in list(running):
        copy.result()


def _start(copies: ThreadPoolExecutor | None, copy: Callable[..., int], *arguments: Any) -> Future[int]:
    """`copy(*arguments)` on one of `copies`' threads, or here and now when the task has one partition."""
    if copies is not None:
        return copies.submit(copy, *arguments)
    done: Future[int] = Future()
    done.set_result(copy(*arguments))
    return done


def _copy(source: ClusterConfig, target: ClusterConfig, f: _Partition, lease: PartitionLease, options: CopyOptions,
          ended: Callable[[], bool]) -> int:
    """One partition copied up to its source's last stable offset as last read (`options.ends_read`),
    unless the term has ended; the records copied."""
    if ended():
        return 0
    try:
        if not lease.held():
            lease.acquire(wait_s=0)  # held by another copier: named, tried again later
        if f.committed is None:
            f.own_end = _own_end_now(source, target, f)
        result = copy_partition(source, target, dataclasses.replace(f.unit, end_offset=options.ends_read[1]),
                                options, (), f.own_end, lease)
    except TermEnded:
        f.committed = None
        return 0
    except (KmigrateError, PartitionHeld) as exc:
        f.committed = None  # the next copy checks what this one left
        _failed(f, str(exc))
        return 0
    f.own_end = f.committed = result.target_end
    f.whole_only = result.records == result.whole_records  # none at all too: an idle partition waits in a Fetch
    f.source_start = options.ends_read[0]
    f.batch_limit = int((options.target_configs or {}).get(f.unit.target_topic, {}).get("max.message.bytes", 0)) or None
    f.error, f.failures = None, 0
    f.records += result.records
    f.copies += 1
    if result.records:
        f.wrote_at = time.monotonic()
    return result.records


def _behind(source: ClusterConfig, target: ClusterConfig, partitions: dict[Key, _Partition], keys: Sequence[Key],
            options: CopyOptions) -> dict[Key, CopyOptions]:
    """The partitions of `keys` behind the source, or not copied yet this term, each with the options
    of its next copy: its ends as read now (`CopyOptions.ends_read`; a copy goes up to the source's
    last stable offset), the target topics' configs; every partition waits, named, when a cluster
    does not answer."""
    away = any(partitions[k].error for k in keys)  # a cluster gone (a failure, a stream broken): known at once
    try:
        starts, stable = ends.read(source, keys, (ends.START, ends.STABLE), OFFSETS_TIMEOUT_S, away=away)
        on_dr = {f.unit.topic: f.unit.target_topic for f in map(partitions.get, keys) if f.unit.renamed}  # names there
        dr_starts, dr_ends = ends.read(target, keys, (ends.START, ends.HIGH), OFFSETS_TIMEOUT_S, away=away, names=on_dr)
        # behind, or not copied yet this term: a partition's first copy of a term makes the resume checks (what
        # lies below its DR end is the source's), then it waits in step, even with nothing to copy
        behind = [k for k in keys
                  if dr_ends[k] < stable[k] or dr_starts[k] < starts[k] or partitions[k].committed is None]
        if behind:
            with shared_admin(target, OFFSETS_TIMEOUT_S) as admin:
                configs = admin.topics_configs({partitions[k].unit.target_topic for k in behind})  # once a read
    except KmigrateError as exc:  # a cluster away for now: every partition read waits, named
        for key in keys:
            _failed(partitions[key], f"reading the partitions' offsets: {exc}")
        return {}
    copies = {}
    for key in keys:
        f = partitions[key]
        if key not in behind:
            f.error, f.failures = None, 0
            continue
        copies[key] = dataclasses.replace(
            options, target_configs=configs, continues_at=f.committed, raw_producer=f.producer,
            eager_producer=not f.whole_only, ends_read=(starts[key], stable[key], dr_starts[key], dr_ends[key]))
    return copies


def _own_end_now(source: ClusterConfig, target: ClusterConfig, f: _Partition) -> int | None:
    """Where the mirror's copies left the partition's DR end, read with its lease held: the DR end
    when it lies above where the driver asked them to begin and at most one past the source's last
    stable offset (read after it), else `f.own_end`. A copy of the term before (its driver killed,
    or its task not yet told that the term ended) may write after the driver read the DR ends for
    this term; the DR end it leaves is the mirror's own, which matters once the source's log start
    moves past it (as the driver's own count of what was written unreported, `written_unreported`)."""
    if f.began is None:
        return f.own_end
    key, there = (f.unit.topic, f.unit.partition), f.unit.target_key
    dr_end = ends.read(target, [there], (ends.HIGH,), OFFSETS_TIMEOUT_S, retry=True)[0][there]
    source_end = ends.read(source, [key], (ends.STABLE,), OFFSETS_TIMEOUT_S, retry=True)[0][key]
    return dr_end if written_by_the_mirror(f.began, dr_end, source_end) else f.own_end


def written_by_the_mirror(began: int, dr_end: int, source_end: int) -> bool:
    """Whether a DR end can only be the mirror's copies' doing: above where they were asked to begin
    (the partition's lease kept other copiers out, and each copy checked what lay below its start
    before it wrote) and at most one past what the source held since (a commit marker may follow
    the last record). The driver's `written_unreported` and a task's first copy both decide so."""
    return began < dr_end <= source_end + 1


def _failed(f: _Partition, error: str) -> None:
    f.error = error
    f.failures += 1
    f.pause_until = time.monotonic() + min(MAX_PAUSE_S, 0.25 * 2 ** f.failures)
    log.warning("mirror %s[%d]: %s; tried again in %.1f s", f.unit.topic, f.unit.partition, error,
             f.pause_until - time.monotonic())


def _verify(source: ClusterConfig, target: ClusterConfig, partitions: Sequence[_Partition] | Any) -> None:
    """What the term copied since each partition's last verification, verified while the source is
    live (only what came after its previous row is read)."""
    for f in partitions:
        end = f.own_end  # a partition followed in step moves it meanwhile
        if end is None or end == f.verified_to:
            continue
        unit = dataclasses.replace(f.unit, end_offset=end)
        try:
            row = verify_live(source, target, unit, f.compacted, f.previous)
        except KmigrateError as exc:
            row = {"topic": unit.topic, "partition": unit.partition, "equal": False, "problems": [str(exc)]}
        f.checked = row
        if row.get("equal"):  # else the next verification reads again from the last equal row
            f.previous, f.verified_to = row, end


def copy_term_here(clients: tuple[ClusterConfig, ClusterConfig], units: Sequence[WorkUnit],
                   extras: Mapping[Key, dict[str, Any]], term: Term) -> list[dict[str, Any]]:
    """A term copied in this process, all its units in one task (tests; a mirror without Spark)."""
    return mirror_bin([(u, extras[(u.topic, u.partition)]) for u in units], clients, term)
