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
"""
from __future__ import annotations

import functools
import sys
import time

from driver import job_arguments
from kmigrate.errors import KmigrateError
from kmigrate.manifest import Manifest, Part
from kmigrate.run.clients import load_clients_from
from kmigrate.run.plan import copy_progress, read_plan, targets_settled, translate_maps, work_units
from kmigrate.run.targets import prepare_targets
from kmigrate.run.tasks import copy_task
from kmigrate_spark.session import SessionSoon
from kmigrate_spark.units import run_on_spark, say

JOB = "copy_partitions"


def describe(row: dict) -> str:
    if not row["ok"]:
        return f"FAILED: {row['error']}"
    return (f"ok: {row['records']} records, {row['bytes']} bytes, {row['fillers']} fillers, "
            f"{row['copy_seconds']:.2f}s" + ("" if row["digests_equal"] is None else
                                              f", digests equal: {row['digests_equal']}"))


def main(argv: list[str] | None = None) -> int:
    parser = job_arguments(__doc__, "copied")
    parser.add_argument("--plan-part", default="plan", help="the manifest part holding the work units "
                        "(the pre-copy runs from pre-copy-plan)")
    parser.add_argument("--fetch-max-bytes", type=int, help="bytes per fetch of whole record batches")
    parser.add_argument("--no-verify", action="store_true",
                        help="skip each partition's digest comparison after its copy (when the verify job follows)")
    args = parser.parse_args(argv)
    try:
        manifest = Manifest(args.state_location, args.run_id)
        units = work_units(read_plan(manifest, args.plan_part))
        clients = load_clients_from(args.clients)
        with SessionSoon(f"kmigrate-copy-{args.run_id}", args.remote) as session:
            prepare_targets(*clients, units, manifest=manifest)
            say(JOB, f"both clusters answer, {len(units)} partitions planned, target topics ready "
                     f"({time.monotonic() - session.begun:.1f}s)")
            rows, seconds, warm_up_s = run_on_spark(
                session, units,
                # a partial of a library function: executors import it by name, nothing from this file
                functools.partial(copy_task, clients=clients, run_id=args.run_id,
                                  resume_maps=translate_maps(manifest), fetch_max_bytes=args.fetch_max_bytes,
                                  verify=not args.no_verify),
                job=JOB, action="copy", describe=describe, parallelism=args.parallelism,
                progress=copy_progress(clients[1], units),
                settle=functools.partial(targets_settled, clients[1], units))
    except KmigrateError as exc:
        say(JOB, f"error: {exc}", err=True)
        return 2
    attempt = Part.attempt(Part.COPY_RESULTS)
    manifest.write_once(attempt, {"rows": rows, "seconds": seconds, "warm_up_seconds": warm_up_s})
    failed = [r for r in rows if not r["ok"]]
    if failed:
        names = ", ".join(f"{r['topic']}[{r['partition']}]" for r in failed)
        say(JOB, f"{len(failed)} of {len(rows)} partitions failed: {names}; see {manifest.location}/{attempt}.json "
                 "and re-run the job once the cause is fixed (copied partitions are kept)", err=True)
        return 1
    records = sum(r["records"] for r in rows)
    say(JOB, f"{len(rows)} partitions copied, {records} new records in {seconds:.1f}s; "
             f"results in {manifest.location}/{attempt}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
