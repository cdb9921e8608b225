"""`make demo`: a whole migration on the local stack, the way a user runs one.

Seeds a mixed workload on the source cluster (a plain topic, a compacted one, a transactional one,
one whose log start is above 0, two consumer groups, a FileStreamSource and a FileStreamSink
connector), then runs the `kafka_migration` DAG with Airflow's `dag.test()` in a local Airflow
(SQLite, under .stack/airflow), Spark in local mode: spark-submit a job, or with --spark-remote the
jobs as clients of a running Spark Connect server (`make demo` starts one), given to Airflow as the
connection spark_connect_default. Prints the steps as they run, the report's summary and where the
report is; the last line is one JSON object.

    .venv/bin/python stack/demo.py [--records 2000] [--keep-connectors] [--spark-remote sc://HOST:PORT]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import local_airflow as local  # noqa: E402 - nothing from Airflow is imported before configure()
from stack_common import PROJECT_DIR, poll_until  # noqa: E402

DEMO_DIR = PROJECT_DIR / ".stack" / "demo"
AIRFLOW_HOME = PROJECT_DIR / ".stack" / "airflow"
SOURCE, TARGET = "localhost:19092", "localhost:29092"
SOURCE_CONNECT, TARGET_CONNECT = "http://localhost:18083", "http://localhost:28083"


def run_dag(conf: dict) -> int:
    """In this process (the child): one dag.test() run; exit 0 on success."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(PROJECT_DIR / "dags"))
    if bag.import_errors:
        print(f"demo: DAG import errors: {bag.import_errors}", file=sys.stderr)
        return 2
    run = local.dag_test(bag.get_dag("kafka_migration"), conf)
    return 0 if str(run.state) == "success" else 1


def follow(log: Path, proc: subprocess.Popen) -> None:
    """Print each DAG step as the child starts it, until the child exits."""
    started = re.compile(r"\[DAG TEST\] starting task_id=(\w+) map_index=(-?\d+)")
    seen, position, began = [], 0, time.monotonic()

    def print_new_steps() -> bool:
        nonlocal position
        done = proc.poll() is not None
        with log.open(errors="replace") as handle:
            handle.seek(position)
            chunk = handle.read()
            position = handle.tell()
        for task_id, index in started.findall(chunk):
            step = task_id if index == "-1" else f"{task_id}[{index}]"  # a mapped task's cell
            attempt = seen.count(step) + 1
            seen.append(step)
            print(f"demo: [{time.monotonic() - began:6.1f}s] {step}" + (f" (run {attempt})" if attempt > 1 else ""),
                  flush=True)
        return done

    poll_until(print_new_steps, math.inf)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=2000, help="records per partition of the plain topics")
    parser.add_argument("--keep-connectors", action="store_true", help="leave the demo's connectors in place")
    parser.add_argument("--spark-remote", default=os.environ.get("KMIGRATE_SPARK_REMOTE") or None,
                        help="run the DAG's Spark jobs on this Spark Connect server (sc://HOST:PORT; make demo starts "
                             "one), given to Airflow as the connection spark_connect_default, so that no Spark "
                             "application starts inside the cutover window; default: $KMIGRATE_SPARK_REMOTE, else "
                             "spark-submit")
    parser.add_argument("--run-dag", help=argparse.SUPPRESS)
    args = parser.parse_args()
    # the DAG run (--run-dag, a child) inherits the spark_connect_default connection of its parent
    local.configure(AIRFLOW_HOME, local.connections(SOURCE, TARGET, SOURCE_CONNECT, TARGET_CONNECT,
                                                    spark_connect=None if args.run_dag else args.spark_remote))
    if args.run_dag:
        return run_dag(json.loads(args.run_dag))

    from kmigrate.config import ClusterConfig
    from kmigrate.kafka.connect import ConnectClient
    from kmigrate.manifest import Manifest
    from kmigrate.run.report.markdown import write_report
    from kmigrate_demo.workload import seed_mixed

    local.migrate_db(AIRFLOW_HOME)
    prefix = f"demo{uuid.uuid4().hex[:6]}"
    workdir = DEMO_DIR / prefix
    source_connect, target_connect = ConnectClient(SOURCE_CONNECT), ConnectClient(TARGET_CONNECT)
    print(f"demo: seeding a mixed workload '{prefix}' on the source cluster ({SOURCE})", flush=True)
    w = seed_mixed(ClusterConfig.from_bootstrap("source", SOURCE), source_connect, prefix, workdir,
                   records=args.records)
    state = DEMO_DIR / "state"
    conf = {"topics_include": w.topic_pattern, "groups": w.group_pattern,
            "connectors": [w.source_connector, w.sink_connector],
            "connector_overrides": {w.sink_connector: {"file": str(w.sink_file_target)}},
            "quiesce_seconds": 3, "state_location": str(state), "run_name": prefix}
    log = workdir / "airflow.log"
    print(f"demo: running the kafka_migration DAG (Airflow log: {log})", flush=True)
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, __file__, "--run-dag", json.dumps(conf)], stdout=out,
                                stderr=subprocess.STDOUT, cwd=PROJECT_DIR)
        follow(log, proc)
    try:
        manifest = Manifest(str(state), prefix)
        path, summary = write_report(manifest)
        if proc.returncode != 0:
            print(f"demo: the DAG run failed; see {log}", file=sys.stderr)
            return 1
        print("demo: " + Path(path).read_text().split("## Partitions")[0].strip().replace("\n", "\ndemo: "))
        print(f"demo: report: {path}")
        print(f"demo: the run as a timeline: {summary.get('timeline_chart_path')}")
        print(f"demo: chart of the copy time per partition: {summary.get('chart_path')}")
        print(json.dumps({key: summary.get(key) for key in (
            "report", "timeline_chart_path", "chart_path", "partitions", "partitions_equal", "verified_records_pct",
            "groups", "groups_exact", "connectors", "connectors_resumed", "downtime_s", "records", "fillers")}))
        return 0
    finally:
        if not args.keep_connectors:
            for client in (source_connect, target_connect):
                for name in (w.source_connector, w.sink_connector):
                    if name in client.connectors():
                        client.delete(name)


if __name__ == "__main__":
    sys.exit(main())
