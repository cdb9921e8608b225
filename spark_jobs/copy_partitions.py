"""Copy every partition of a run's plan from the source cluster to the target, one Spark task per
partition work unit, each running the kmigrate copier (which resumes from the target's end, so a
retried task continues where the lost one stopped).

    spark-submit --master 'local[*]' spark_jobs/copy_partitions.py \\
        --state-location ./state --run-id RUN --clients /path/clients.json

--clients is a JSON file {"source": {...}, "target": {...}} of librdkafka settings, mode 600 (secrets
never travel on the command line). Before any task starts, both clusters must answer, every topic of
the plan must exist on the source, and each target topic is created like the source's (or checked).
The result rows go to the run manifest as part copy-results/<attempt>. Exit 0 when every partition
was copied, 1 naming the partitions that failed, 2 when the job could not start (bad input).

The pre-copy (--plan-part pre-copy-plan) copies in rounds while the source is live, each up to the
source's end when it begins, until a round's writes on the source stay within --converged-records
(or --rounds were run); with --verify-live each round then verifies what it copied. The final copy
with --verify-after verifies the plan in the same Spark session (verify_partitions.py's table and
checks) so that no second job starts inside the cutover window.
"""
from __future__ import annotations

import functools
import os
import sys
import time

from driver import check_clusters, job_arguments
from kmigrate.claims import claim_topics
from kmigrate.errors import KmigrateError
from kmigrate.manifest import Manifest, Part
from kmigrate.run.cutover import events
from kmigrate.run.report import timeline
from kmigrate_spark.clients import load_clients_from
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
from kmigrate.run.targets.prepare import prepare_targets
from kmigrate.run.copying.tasks import copy_extras, copy_task, live_verify_extras, live_verify_task
from kmigrate_spark.session import SessionSoon
from kmigrate_spark.units import run_on_spark, say
from verify_partitions import verify_run

JOB = "copy_partitions"


def describe(row: dict) -> str:
    if not row["ok"]:
        return f"FAILED: {row['error']}"
    return (f"ok: {row['records']} records, {row['bytes']} bytes, {row['fillers']} fillers, "
            f"{row['copy_seconds']:.2f}s" + ("" if row["digests_equal"] is None else
                                              f", digests equal: {row['digests_equal']}"))


def main(argv: list[str] | None = None) -> int:
    started = time.time()
    parser = job_arguments(__doc__, "copied")
    parser.add_argument("--plan-part", default="plan", help="the manifest part holding the work units "
                        "(the pre-copy runs from pre-copy-plan)")
    parser.add_argument("--fetch-max-bytes", type=int, help="bytes per fetch of whole record batches")
    parser.add_argument("--no-verify", action="store_true",
                        help="skip each partition's digest comparison after its copy (when the verify job follows)")
    parser.add_argument("--rounds", type=int, default=1, help="copy rounds at most, each up to the source's end when "
                        "it begins (a pre-copy while the source is live)")
    parser.add_argument("--converged-records", type=int, default=0,
                        help="no further round once the source wrote at most this many offsets during one")
    parser.add_argument("--verify-live", action="store_true",
                        help="after each round, verify what it copied while the source is live")
    parser.add_argument("--catch-up", action="store_true",
                        help="copy the plan's partitions up to the source's ends now, not the plan's (a catch-up "
                             "round while waiting for a scheduled cutover)")
    parser.add_argument("--verify-after", action="store_true",
                        help="after the copy, verify the plan in the same Spark session (as verify_partitions.py)")
    parser.add_argument("--source-at-snapshot", action="store_true",
                        help="with --verify-after: fail when the source holds records past the snapshot")
    args = parser.parse_args(argv)
    try:
        manifest = Manifest(args.state_location, args.run_id)
        if events.finished(manifest):
            say(JOB, f"run {args.run_id} resumed on the target already: nothing to copy ({manifest.location})")
            return 0
        if args.catch_up and manifest.exists(Part.event(events.STOPPED)):
            say(JOB, f"run {args.run_id} has stopped its connectors: the final copy follows, no catch-up round")
            return 0
        units = work_units(read_plan(manifest, args.plan_part))
        clients = load_clients_from(args.clients)
        with SessionSoon(f"kmigrate-copy-{args.run_id}", args.remote) as session:
            check_clusters(clients)  # both answer and are two clusters: nothing written to a source taken for a target
            # the run's claim on its topics (taken already when Airflow runs it; a run refused here writes nothing)
            claim_topics(clients[1], args.run_id, {u.topic for u in units}, dag=os.environ.get("AIRFLOW_CTX_DAG_ID"))
            prepare_targets(*clients, units, manifest=manifest)
            if args.catch_up:  # up to the source's ends now: read just before the round begins
                units = source_ends_now(clients[0], units)
            say(JOB, f"both clusters answer, {len(units)} partitions planned, target topics ready "
                     f"({time.monotonic() - session.begun:.1f}s)")

            copied_in = {"records": 0, "seconds": 0.0}

            def copy_round(round_units):
                # a partition empty on both sides needs no task; without a digest check of each copy,
                # neither does one this run already brought to its end
                round_units, rows = units_to_copy(*clients, round_units, manifest, settle_copied=args.no_verify)
                if rows:
                    say(JOB, f"{len(rows)} partitions at their end on the target already (empty, or copied by this "
                             f"run): {len(round_units)} to copy")
                latest = latest_copy_rows(manifest)
                copied, seconds, warm_up_s = run_on_spark(
                    session, round_units,
                    # a partial of a library function: executors import it by name, nothing from this file
                    functools.partial(copy_task, clients=clients, run_id=args.run_id,
                                      fetch_max_bytes=args.fetch_max_bytes, verify=not args.no_verify,
                                      live=args.plan_part != Part.PLAN or args.catch_up),
                    job=JOB, action="copy", describe=describe, parallelism=args.parallelism,
                    progress=copy_progress(clients[1], round_units),
                    settle=functools.partial(targets_settled, clients[1], round_units),
                    extras=copy_extras(translate_maps(manifest, latest), copied_ends(manifest, latest))
                ) if round_units else ([], 0.0, 0.0)
                rows += copied
                copied_in["records"] += sum(r["records"] for r in copied if r["ok"])
                copied_in["seconds"] += seconds
                manifest.write_once(Part.attempt(Part.COPY_RESULTS),
                                    {"rows": rows, "seconds": seconds, "warm_up_seconds": warm_up_s})
                return rows

            verify_round = None
            if args.verify_live:
                compacted = compacted_topics(clients[0], {u.topic for u in units})

                def verify_round(round_units, previous):
                    return run_on_spark(
                        session, round_units, functools.partial(live_verify_task, clients=clients),
                        job=JOB, action="verify", parallelism=args.parallelism,
                        describe=lambda r: "equal while live" if r["equal"] else "; ".join(r["problems"]),
                        extras=live_verify_extras(previous, compacted))[0]

            if args.rounds > 1 or verify_round:
                units, failed = pre_copy_rounds(manifest, clients[0], units, copy_round, verify_round,
                                                max_rounds=args.rounds, converged_records=args.converged_records,
                                                say=lambda line: say(JOB, line))
            else:
                failed = [r for r in copy_round(units) if not r["ok"]]
            if failed:
                names = ", ".join(f"{r['topic']}[{r['partition']}]" for r in failed)
                say(JOB, f"{len(failed)} of {len(units)} partitions failed: {names}; see the copy-results parts in "
                         f"{manifest.location} and re-run the job once the cause is fixed (copied partitions are kept)",
                    err=True)
                return 1
            if args.plan_part == Part.PLAN:
                timeline.record(manifest, "copy", started, partitions=len(units))
            say(JOB, f"{len(units)} partitions copied, {copied_in['records']} new records in "
                     f"{copied_in['seconds']:.1f}s; results in {manifest.location}/{Part.COPY_RESULTS}/")
            if args.verify_after:
                return verify_run(session, manifest, units, clients, parallelism=args.parallelism, job=JOB,
                                  source_at_snapshot=args.source_at_snapshot)
    except KmigrateError as exc:
        say(JOB, f"error: {exc}", err=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
