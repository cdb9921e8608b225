"""Verify every partition of a run's plan: log start, log end and content digest on the source and
the target, one Spark task per partition, both clusters read in parallel. Read-only on both.

    spark-submit --master 'local[*]' spark_jobs/verify_partitions.py \\
        --state-location ./state --run-id RUN --clients /path/clients.json

The verification table goes to the run manifest as part verification/<attempt>: one row per
partition with both sides' watermarks and digests, "equal" and the problems found. Translate-mode
partitions are checked through the offset maps the copy job recorded. Exit 0 when every partition
is equal, 1 naming those that are not, 2 when the job could not start (bad input).
"""
from __future__ import annotations

import functools
import sys

from driver import job_arguments
from kmigrate.errors import KmigrateError
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.manifest import Manifest, Part
from kmigrate.run.clients import load_clients_from
from kmigrate.run.plan import read_plan, translate_maps, work_units
from kmigrate.run.tasks import verify_task
from kmigrate_spark.session import SessionSoon
from kmigrate_spark.units import run_on_spark, say

JOB = "verify_partitions"


def describe(row: dict) -> str:
    if row["equal"]:
        return f"equal: {row['records']} records, [{row['target_log_start']}, {row['target_end']}), {row['seconds']:.2f}s"
    return "NOT EQUAL: " + "; ".join(row["problems"])


def main(argv: list[str] | None = None) -> int:
    args = job_arguments(__doc__, "verified").parse_args(argv)
    try:
        manifest = Manifest(args.state_location, args.run_id)
        units = work_units(read_plan(manifest))
        clients = load_clients_from(args.clients)
        with SessionSoon(f"kmigrate-verify-{args.run_id}", args.remote) as session:
            for cluster in clients:
                with ClusterAdmin(cluster, timeout_s=10) as admin:
                    admin.check_reachable()
            rows, seconds, warm_up_s = run_on_spark(
                session, units, functools.partial(verify_task, clients=clients, offset_maps=translate_maps(manifest)),
                job=JOB, action="verify", describe=describe, parallelism=args.parallelism)
    except KmigrateError as exc:
        say(JOB, f"error: {exc}", err=True)
        return 2
    unequal = [r for r in rows if not r["equal"]]
    attempt = Part.attempt(Part.VERIFICATION)
    manifest.write_once(attempt, {"rows": rows, "all_equal": not unequal, "seconds": seconds,
                                  "warm_up_seconds": warm_up_s})
    if unequal:
        names = ", ".join(f"{r['topic']}[{r['partition']}]" for r in unequal)
        say(JOB, f"{len(unequal)} of {len(rows)} partitions differ: {names}; table in {manifest.location}/{attempt}.json",
            err=True)
        return 1
    say(JOB, f"all {len(rows)} partitions equal ({sum(r['records'] for r in rows)} records) in {seconds:.1f}s; "
             f"table in {manifest.location}/{attempt}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
