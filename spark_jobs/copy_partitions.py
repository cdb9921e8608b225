"""Copy every partition of a run's plan from the source cluster to the target, one Spark task per
partition, each running the kmigrate copier (which resumes from the target's end, so a retried
task continues where the lost one stopped).

    spark-submit --master 'local[2]' spark_jobs/copy_partitions.py \\
        --state-location ./state --run-id RUN --clients /path/clients.json

--clients is a JSON file {"source": {...}, "target": {...}} of librdkafka settings, mode 600.
The result rows go to the run manifest as part copy-results/<attempt>; the job exits 1 naming
every partition that failed.
"""
from __future__ import annotations

import argparse
import sys
import time
import uuid
from typing import Any

from kmigrate.copier import CopyOptions, copy_partition
from kmigrate.errors import KmigrateError
from kmigrate.manifest import Manifest
from kmigrate.plan import load_clients, read_plan, work_units


def copy_unit(unit: Any, clients: tuple[Any, Any], run_id: str) -> dict[str, Any]:
    """Runs on an executor. Data errors (foreign target, mismatches) become a failed row; anything
    else propagates so that Spark retries the task."""
    source, target = clients
    try:
        return {"ok": True, **copy_partition(source, target, unit, CopyOptions(run_id=run_id)).as_row()}
    except KmigrateError as exc:
        return {"ok": False, "topic": unit.topic, "partition": unit.partition, "error": str(exc)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--state-location", required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--clients", required=True, help="JSON file of client configs, mode 600")
    args = parser.parse_args(argv)
    try:
        manifest = Manifest(args.state_location, args.run_id)
        units = work_units(read_plan(manifest))
        clients = load_clients(args.clients)
    except KmigrateError as exc:
        print(f"copy_partitions: {exc}", file=sys.stderr)
        return 2

    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName(f"kmigrate-copy-{args.run_id}").getOrCreate()
    started = time.monotonic()
    try:
        run_id = args.run_id
        rows = (spark.sparkContext.parallelize(units, max(1, len(units)))
                .map(lambda unit: copy_unit(unit, clients, run_id))
                .collect())
    finally:
        spark.stop()
    attempt = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
    manifest.write_once(f"copy-results/{attempt}", {"rows": rows, "seconds": round(time.monotonic() - started, 3)})
    failed = [r for r in rows if not r["ok"]]
    for row in rows:
        state = "ok" if row["ok"] else f"FAILED: {row['error']}"
        print(f"copy_partitions: {row['topic']}[{row['partition']}] {row.get('records', 0)} records, {state}")
    if failed:
        names = ", ".join(f"{r['topic']}[{r['partition']}]" for r in failed)
        print(f"copy_partitions: {len(failed)} of {len(rows)} partitions failed: {names}", file=sys.stderr)
        return 1
    print(f"copy_partitions: {len(rows)} partitions copied; results in {manifest.location}/copy-results/{attempt}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
