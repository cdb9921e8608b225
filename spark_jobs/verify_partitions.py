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

import argparse
import functools
import sys
import time

from driver import run_units, say, start_spark, warm_up

from kmigrate.admin import ClusterAdmin
from kmigrate.copier import TRANSLATE
from kmigrate.errors import KmigrateError
from kmigrate.manifest import Manifest
from kmigrate.plan import VERIFICATION, latest_copy_rows, load_clients_from, new_attempt, offset_map_of, read_plan, work_units
from kmigrate.tasks import verify_task

JOB = "verify_partitions"


def describe(row: dict) -> str:
    if row["equal"]:
        return f"equal: {row['records']} records, [{row['target_log_start']}, {row['target_end']}), {row['seconds']:.2f}s"
    return "NOT EQUAL: " + "; ".join(row["problems"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--state-location", required=True, help="local path or fsspec URL of the run manifests")
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--clients", help="JSON file of client configs, mode 600 (default: $KMIGRATE_CLIENTS_JSON)")
    parser.add_argument("--parallelism", type=int, help="partitions verified at once (default: the task slots)")
    args = parser.parse_args(argv)
    try:
        manifest = Manifest(args.state_location, args.run_id)
        units = work_units(read_plan(manifest))
        clients = load_clients_from(args.clients)
        offset_maps = {key: offset_map_of(row) for key, row in latest_copy_rows(manifest).items()
                       if row["mode"] == TRANSLATE}
        for cluster in clients:
            with ClusterAdmin(cluster, timeout_s=10) as admin:
                admin.check_reachable()
    except KmigrateError as exc:
        say(JOB, f"error: {exc}", err=True)
        return 2

    spark = start_spark(f"kmigrate-verify-{args.run_id}")
    try:
        warm_up_s = warm_up(spark)
        started = time.monotonic()
        rows = run_units(spark, units, functools.partial(verify_task, clients=clients, offset_maps=offset_maps),
                         job=JOB, action="verify", describe=describe, parallelism=args.parallelism)
        seconds = round(time.monotonic() - started, 3)
    except KmigrateError as exc:
        say(JOB, f"error: {exc}", err=True)
        return 2
    finally:
        spark.stop()
    unequal = [r for r in rows if not r["equal"]]
    attempt = f"{VERIFICATION}/{new_attempt()}"
    manifest.write_once(attempt, {"rows": rows, "all_equal": not unequal, "seconds": seconds,
                                  "warm_up_seconds": round(warm_up_s, 3)})
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
