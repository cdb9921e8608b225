"""The copy jobs' driver side, one function a kind of copy job, each with its course fixed by its
kind. Each copies partitions of a plan of the run manifest from the source cluster to the target,
one Spark task per partition work unit running the kmigrate copier (which resumes from the target's
end, so a retried task continues where the lost one stopped):

- `copy_plan`: the plan, each partition's digest compared after its copy (tests, benchmarks, by hand);
- `drill_copy`: the plan, no digest (the DR drill's verify job follows and reads both sides);
- `window_copy`: the plan in the cutover window, then its verification in the same Spark session
  (kmigrate_spark.verify_job), so that no second job starts inside the window; it fails with
  FINAL_EXIT when the source holds records past the snapshot;
- `pre_copy`: the pre-copy plan while the source is live, in rounds each up to the source's end when
  it begins, until a round's writes on the source stay within --converged-records (or --rounds were
  run); each round's copy is then verified while the source is live;
- `catch_up`: one such round up to the source's ends now (while a run waits for its cutover time);
  none once the run has stopped its connectors (the window copy follows).

Before any task starts, both clusters must answer, the run claims its topics on the target, every
topic of the plan must exist on the source, and each target topic is created like the source's (or
checked). The result rows go to the run manifest as part copy-results/<attempt>. Exit 0 when every
partition was copied, 1 naming the partitions that failed, 2 when the job could not start (bad
input); nothing once the run has finished."""
from __future__ import annotations

import argparse
import functools
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from kmigrate.claims.runs import claim_topics
from kmigrate.config import ClusterConfig
from kmigrate.manifest import Manifest, Part
from kmigrate.model import WorkUnit
from kmigrate.run.copying.plan import (
    copied_ends,
    copy_progress,
    latest_copy_rows,
    read_plan,
    source_ends_now,
    targets_settled,
    translate_maps,
    units_to_copy,
    work_units,
)
from kmigrate.run.copying.precopy import compacted_topics, pre_copy_rounds
from kmigrate.run.copying.tasks import copy_extras, copy_task, live_verify_extras, live_verify_task
from kmigrate.run.records import events
from kmigrate.run.records import timeline
from kmigrate.run.targets.prepare import prepare_targets
from pyspark.sql import SparkSession

from kmigrate_spark.clients import load_clients_from
from kmigrate_spark.guards import check_clusters, run_job
from kmigrate_spark.session import SessionSoon
from kmigrate_spark.units import run_on_spark, say
from kmigrate_spark.verify_job import verify_run

Clients = tuple[ClusterConfig, ClusterConfig]
# what follows a successful copy in the same Spark session: (session, manifest, units, clients) -> exit code
Then = Callable[[SessionSoon, Manifest, Sequence[WorkUnit], Clients], int]


def copy_plan(args: argparse.Namespace) -> int:
    """The plan, each partition's digest compared after its copy."""
    return _copy("copy_partitions", args, digests=True)


def drill_copy(args: argparse.Namespace) -> int:
    """The plan, no digest a partition: the DR drill's verify job follows."""
    return _copy("drill_copy", args)


def window_copy(args: argparse.Namespace, clients: Clients | None = None, session: SparkSession | None = None) -> int:
    """The plan in the cutover window, then its verification in the same Spark session: 1 naming
    the partitions that differ, FINAL_EXIT when the source moved past the snapshot. `clients` and
    `session`: the two clusters and a Spark Connect session, when the caller has them (the cutover
    task, running this job in its own process); else from --clients or the environment, and a
    session started here."""
    def verify(session: SessionSoon, manifest: Manifest, units: Sequence[WorkUnit], clients: Clients) -> int:
        return verify_run(session, manifest, units, clients, parallelism=args.parallelism, job="window_copy",
                          source_at_snapshot=True)

    return _copy("window_copy", args, then=verify, clients=clients, session=session)


def pre_copy(args: argparse.Namespace) -> int:
    """The pre-copy plan in rounds while the source is live (--rounds, --converged-records), each
    round's copy verified live."""
    return _copy("pre_copy", args, part=Part.PRE_COPY_PLAN, rounds=(args.rounds, args.converged_records))


def catch_up(args: argparse.Namespace) -> int:
    """One pre-copy round up to the source's ends now, verified live; none once the run has stopped
    its connectors."""
    return _copy("catch_up", args, part=Part.PRE_COPY_PLAN, rounds=(1, 0), catch_up=True)


def describe(row: dict) -> str:
    """A copied partition's line in the driver's log."""
    if not row["ok"]:
        return f"FAILED: {row['error']}"
    return (f"ok: {row['records']} records, {row['bytes']} bytes, {row['fillers']} fillers, "
            f"{row['copy_seconds']:.2f}s" + ("" if row["digests_equal"] is None else
                                              f", digests equal: {row['digests_equal']}"))


def _copy(job: str, args: argparse.Namespace, *, part: str = Part.PLAN, digests: bool = False,
          rounds: tuple[int, int] | None = None, catch_up: bool = False, then: Then | None = None,
          clients: Clients | None = None, session: SparkSession | None = None) -> int:
    """The copy jobs' common course, logged as `job`: the units of the manifest's `part` (the
    source is live while they are copied unless it is the plan), each partition's digest compared
    after its copy with `digests`; with `rounds` (at most, converged records) in pre-copy rounds,
    each verified live, else once; with `catch_up` up to the source's ends now; `then` after a
    successful copy."""
    began = time.time()
    given, started = clients, session

    def work(manifest: Manifest) -> int:
        if catch_up and manifest.exists(Part.event(events.STOPPED)):
            say(job, f"run {args.run_id} has stopped its connectors: the final copy follows, no catch-up round")
            return 0
        units = work_units(read_plan(manifest, part))
        clients = given or load_clients_from(args.clients)
        with SessionSoon(f"kmigrate-copy-{args.run_id}", args.remote, started) as session:
            check_clusters(clients)  # both answer and are two clusters: nothing written to a source taken for a target
            # the run's claim on its topics (taken already when Airflow runs it; a run refused here writes nothing)
            claim_topics(clients[1], args.run_id, {u.target_topic for u in units}, dag=os.environ.get("AIRFLOW_CTX_DAG_ID"),
                         deployment=manifest.state_location)
            prepare_targets(*clients, units, manifest=manifest)
            if catch_up:  # up to the source's ends now: read just before the round begins
                units = source_ends_now(clients[0], units)
            say(job, f"both clusters answer, {len(units)} partitions planned, target topics ready "
                     f"({time.monotonic() - session.begun:.1f}s)")
            copier = _Copier(job, args, session, manifest, clients, digests=digests, live=part != Part.PLAN)
            if rounds is None:
                failed = [r for r in copier.copy(units) if not r["ok"]]
            else:
                units, failed = pre_copy_rounds(manifest, clients[0], units, copier.copy, copier.live_verifier(units),
                                                max_rounds=rounds[0], converged_records=rounds[1],
                                                say=lambda line: say(job, line))
            if failed:
                names = ", ".join(f"{r['topic']}[{r['partition']}]" for r in failed)
                say(job, f"{len(failed)} of {len(units)} partitions failed: {names}; see the copy-results parts in "
                         f"{manifest.location} and re-run the job once the cause is fixed (copied partitions are kept)",
                    err=True)
                return 1
            if part == Part.PLAN:
                timeline.record(manifest, "copy", began, partitions=len(units))
            say(job, f"{len(units)} partitions copied, {copier.records} new records in "
                     f"{copier.seconds:.1f}s; results in {manifest.location}/{Part.COPY_RESULTS}/")
            if then is not None:
                return then(session, manifest, units, clients)
        return 0

    return run_job(job, args, work, finished=": nothing to copy ({location})")


class _Copier:
    """A copy job's rounds on its Spark session: each copies its units (those not at their end on
    the target already), writes its rows (part copy-results/<attempt>) and adds to the job's totals,
    `records` and `seconds`."""

    def __init__(self, job: str, args: argparse.Namespace, session: SessionSoon, manifest: Manifest,
                 clients: Clients, *, digests: bool, live: bool) -> None:
        self.job, self.args, self.session, self.manifest, self.clients = job, args, session, manifest, clients
        self.digests, self.live = digests, live
        self.records, self.seconds = 0, 0.0

    def copy(self, units: Sequence[WorkUnit]) -> list[dict[str, Any]]:
        """One round: the result rows of `units`."""
        clients, manifest = self.clients, self.manifest
        # a partition empty on both sides needs no task; without a digest check of each copy,
        # neither does one this run already brought to its end
        units, rows = units_to_copy(*clients, units, manifest, settle_copied=not self.digests)
        if rows:
            say(self.job, f"{len(rows)} partitions at their end on the target already (empty, or copied by this "
                          f"run): {len(units)} to copy")
        latest = latest_copy_rows(manifest)
        progress = copy_progress(clients[1], units, manifest)
        if units:
            progress()  # the round's start in copy-progress: its offsets a second are counted from here
        copied, seconds, warm_up_s = run_on_spark(
            self.session, units,
            # a partial of a library function: executors import it by name, nothing from the driver's modules
            functools.partial(copy_task, clients=clients, run_id=self.args.run_id,
                              fetch_max_bytes=self.args.fetch_max_bytes, verify=self.digests, live=self.live),
            job=self.job, action="copy", describe=describe, parallelism=self.args.parallelism,
            progress=progress,
            settle=functools.partial(targets_settled, clients[1], units),
            extras=copy_extras(translate_maps(manifest, latest), copied_ends(manifest, latest))
        ) if units else ([], 0.0, 0.0)
        if units:
            progress()  # the round's end in copy-progress (the status lines read every 10 s)
        rows += copied
        self.records += sum(r["records"] for r in copied if r["ok"])
        self.seconds += seconds
        manifest.write_once(Part.attempt(Part.COPY_RESULTS), {"rows": rows, "seconds": seconds,
                                                             "warm_up_seconds": warm_up_s})
        return rows

    def live_verifier(self, units: Sequence[WorkUnit]) -> Callable[[Sequence[WorkUnit], Any], list[dict[str, Any]]]:
        """A round's verification while the source is live: (units, the previous rows) -> rows."""
        compacted = compacted_topics(self.clients[0], {u.topic for u in units})
        return functools.partial(verify_live, self.session, clients=self.clients, compacted=compacted, job=self.job,
                                 parallelism=self.args.parallelism)


def verify_live(session: SessionSoon, units: Sequence[WorkUnit], previous: Any, *, clients: Clients,
                compacted: frozenset[str], job: str, parallelism: int | None, quiet: bool = False
                ) -> list[dict[str, Any]]:
    """`units` verified while the source is live, each from its `previous` row on (a pre-copy round's,
    a mirror's): their rows."""
    return run_on_spark(session, units, functools.partial(live_verify_task, clients=clients), job=job,
                        action="verify", parallelism=parallelism, quiet=quiet,
                        describe=lambda r: "equal while live" if r["equal"] else "; ".join(r["problems"]),
                        extras=live_verify_extras(previous, compacted))[0]
