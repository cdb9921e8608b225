"""The verification's driver side: every partition of a run's plan compared on the source and the
target (log start, log end and content), one Spark task per partition work unit, both clusters read
in parallel. Read-only on both.

`verify_plan` is the verification alone (spark_jobs/verify_partitions.py: the DR drill's verify
task, or by hand); `verify_run` verifies in a Spark session that a job has already, which is how
the window copy (kmigrate_spark.copy_job.window_copy) verifies without a second job in the
cutover window. The table goes to the run manifest as part verification/<attempt>: one row per
partition with both sides' watermarks and digests, "equal", the problems found and which offsets
were verified when. A range the pre-copy verified while the source was live is not read again
(only its last offsets, at the seam); translate-mode partitions are checked through the offset
maps the copy recorded."""
from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Sequence

from kmigrate.config import ClusterConfig
from kmigrate.errors import KmigrateError
from kmigrate.manifest import Manifest, Part
from kmigrate.model import WorkUnit
from kmigrate.run.copying.plan import read_plan, translate_maps, work_units
from kmigrate.run.copying.precopy import compacted_topics, live_rows
from kmigrate.run.copying.tasks import verify_extras, verify_task
from kmigrate.run.cutover.snapshot import check_source_at_snapshot
from kmigrate.run.records import timeline
from kmigrate.run.verify.partition import settle_empty

from kmigrate_spark.clients import load_clients_from
from kmigrate_spark.conf import FINAL_EXIT
from kmigrate_spark.guards import check_clusters, run_job
from kmigrate_spark.session import SessionSoon
from kmigrate_spark.units import run_on_spark, say

JOB = "verify_partitions"


def describe(row: dict) -> str:
    """A verified partition's line in the driver's log."""
    if not row["equal"]:
        return "NOT EQUAL: " + "; ".join(row["problems"])
    live = row.get("verified_live")
    window = row.get("verified_in_window") or [row["target_log_start"], row["target_end"]]
    return (f"equal: {row['records']} records, [{row['target_log_start']}, {row['target_end']})"
            + (f", [{live[0]}, {live[1]}) verified while live, [{window[0]}, {window[1]}) now" if live else "")
            + f", {row['seconds']:.2f}s")


def verify_plan(args: argparse.Namespace) -> int:
    """The verification alone, of the run's plan: 0 when every partition is equal, 1 naming those
    that are not, 2 when the job could not start (bad input); nothing once the run has finished."""
    def work(manifest: Manifest) -> int:
        units = work_units(read_plan(manifest))
        clients = load_clients_from(args.clients)
        with SessionSoon(f"kmigrate-verify-{args.run_id}", args.remote) as session:
            check_clusters(clients)
            return verify_run(session, manifest, units, clients, parallelism=args.parallelism, job=JOB)

    return run_job(JOB, args, work, finished="; its verification is in {location}")


def verify_run(session: SessionSoon, manifest: Manifest, units: Sequence[WorkUnit],
               clients: tuple[ClusterConfig, ClusterConfig], *, parallelism: int | None, job: str,
               source_at_snapshot: bool = False) -> int:
    """Verify `units` on `session`, write the table (part verification/<attempt>) and the
    timeline; 0 when every partition is equal, FINAL_EXIT when the source moved after the
    snapshot (with `source_at_snapshot`: the window copy's source is stopped), else 1."""
    started = time.time()
    extras = verify_extras(translate_maps(manifest), live_rows(manifest),
                           compacted_topics(clients[0], {u.topic for u in units}))
    to_read, empty = settle_empty(*clients, units)
    if empty:
        say(job, f"{len(empty)} partitions empty on both sides at the same offset: equal; {len(to_read)} to read")
    rows, seconds, warm_up_s = run_on_spark(session, to_read, functools.partial(verify_task, clients=clients), job=job,
                                            action="verify", describe=describe, parallelism=parallelism,
                                            extras=extras) if to_read else ([], 0.0, 0.0)
    order = {(u.topic, u.partition): i for i, u in enumerate(units)}
    rows = sorted(rows + empty, key=lambda r: order[(r["topic"], r["partition"])])
    unequal = [r for r in rows if not r["equal"]]
    attempt = Part.attempt(Part.VERIFICATION)
    manifest.write_once(attempt, {"rows": rows, "all_equal": not unequal, "seconds": seconds,
                                  "warm_up_seconds": warm_up_s})
    if unequal:
        names = ", ".join(f"{r['topic']}[{r['partition']}]" for r in unequal)
        say(job, f"{len(unequal)} of {len(rows)} partitions differ: {names}; table in {manifest.location}/{attempt}.json",
            err=True)
        return 1
    if source_at_snapshot:
        try:
            check_source_at_snapshot(manifest, clients[0])
        except KmigrateError as exc:
            say(job, f"error: {exc}", err=True)
            return FINAL_EXIT
    live = sum(1 for r in rows if r.get("verified_live"))
    timeline.record(manifest, "verify", started, partitions=len(rows), verified_live=live)
    say(job, f"all {len(rows)} partitions equal ({sum(r['records'] for r in rows)} records"
             + (f"; {live} partitions up to their pre-copied end verified while the source was live" if live else "")
             + f") in {seconds:.1f}s; table in {manifest.location}/{attempt}.json")
    return 0
