"""Cutover window benchmark on the local stack (`make bench-cutover`).

The same migration at two sizes, in one run: the demo's mixed workload (plain, compacted and
transactional topics, two consumer groups, a FileStreamSource and a FileStreamSink connector) plus
a bulk topic of 8 KiB random values, the larger size at least 8x the data of the smaller. A writer
keeps appending to the bulk topic while the pre-copy runs, as applications do until their owners
stop them at the cutover (it stops when the run stops the connectors). Each size runs the
kafka_migration DAG (dag.test, as `make demo` does) with the pre-copy on, its Spark jobs on the
Spark Connect server `make bench-cutover` starts, quiesce_seconds 2. Before them, the smaller size
runs once more through a real scheduler: triggered through the REST API of the Airflow that
`make airflow-up` starts (LocalExecutor), on its default connections, as a user's run goes
(`downtime_scheduler_s`, and `between_steps_s`: the window's seconds outside every step). What each
window's seconds went to comes from the run's report; the larger run's timeline goes to
docs/bench_cutover_timeline.png. The last line is one JSON object.

    python bench/bench_cutover.py [--small-mib 128] [--large-mib 1152] [--write-rate 200] [--scheduled-only]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_DIR / "stack"))

import local_airflow as local  # noqa: E402
from common import SOURCE, TARGET, delete_groups, delete_topics  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from kmigrate.kafka.admin import ClusterAdmin  # noqa: E402
from kmigrate.kafka.connect import ConnectClient  # noqa: E402
from kmigrate.manifest import Manifest, Part  # noqa: E402
from kmigrate.run.records import events  # noqa: E402
from kmigrate.run.report.markdown import write_report  # noqa: E402
from kmigrate_demo.workload import seed_mixed  # noqa: E402

SOURCE_CONNECT, TARGET_CONNECT = "http://localhost:18083", "http://localhost:28083"
WORK_DIR = PROJECT_DIR / ".stack" / "bench-cutover"
AIRFLOW_HOME = PROJECT_DIR / ".stack" / "airflow"
VALUE_SIZE = 8 << 10
BULK_PARTITIONS = 4


def say(line: str) -> None:
    print(f"bench-cutover: {line}", flush=True)


def seed_bulk(topic: str, mib: int) -> int:
    """`mib` MiB of 8 KiB values (random, so that nothing compresses them away) in 4 partitions."""
    with ClusterAdmin(SOURCE) as admin:
        admin.create_topic(topic, BULK_PARTITIONS, {})
    producer = Producer(SOURCE.producer(**{"linger.ms": 20, "batch.size": 1 << 20,
                                           "queue.buffering.max.kbytes": 512 << 10}))
    pool = os.urandom(VALUE_SIZE * 2)
    records = (mib << 20) // VALUE_SIZE
    for i in range(records):
        start = (i * 7919) % VALUE_SIZE
        while True:
            try:
                producer.produce(topic, key=b"bulk-%09d" % i, value=pool[start:start + VALUE_SIZE],
                                 partition=i % BULK_PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        raise RuntimeError("bench: bulk records left undelivered")
    return records


class LiveWriter(threading.Thread):
    """Appends to `topic` at `rate` records/s until the run has stopped its connectors."""

    def __init__(self, topic: str, rate: int, manifest: Manifest) -> None:
        super().__init__(daemon=True)
        self.topic, self.rate, self.manifest, self.written = topic, rate, manifest, 0
        self._done = threading.Event()

    def run(self) -> None:
        producer = Producer(SOURCE.producer(**{"linger.ms": 5}))
        value = os.urandom(VALUE_SIZE)
        began = time.monotonic()
        while not self._done.is_set() and not self.manifest.exists(Part.event(events.STOPPED)):
            due = int((time.monotonic() - began) * self.rate)
            while self.written < due:
                producer.produce(self.topic, key=b"live-%09d" % self.written, value=value,
                                 partition=self.written % BULK_PARTITIONS)
                self.written += 1
            producer.poll(0)
            time.sleep(0.02)
        producer.flush(30)

    def stop(self) -> None:
        self._done.set()
        self.join(60)


def run_size(label: str, mib: int, args: argparse.Namespace, scheduled: bool = False) -> dict:
    prefix = f"cut{label}{uuid.uuid4().hex[:5]}"
    workdir = WORK_DIR / prefix
    source_connect, target_connect = ConnectClient(SOURCE_CONNECT), ConnectClient(TARGET_CONNECT)
    say(f"{label}: seeding the mixed workload and {mib} MiB of bulk values ('{prefix}')")
    w = seed_mixed(SOURCE, source_connect, prefix, workdir, records=2000)
    bulk = w.topic("bulk")
    bulk_records = seed_bulk(bulk, mib)
    state = WORK_DIR / "state"
    manifest = Manifest(str(state), prefix)
    conf = {"topics_include": w.topic_pattern, "groups": w.group_pattern,
            "connectors": [w.source_connector, w.sink_connector],
            "connector_overrides": {w.sink_connector: {"file": str(w.sink_file_target)}},
            "quiesce_seconds": 2, "pre_copy_converged_records": args.converged_records,
            "state_location": str(state), "run_name": prefix}  # Spark: the spark_connect_default connection
    writer = LiveWriter(bulk, args.write_rate, manifest)
    log = workdir / "airflow.log"
    how = (f"through the scheduler at {args.airflow_url} (REST trigger)" if scheduled else
           f"with dag.test() (Airflow log: {log})")
    say(f"{label}: running the kafka_migration DAG {how}, a writer appending {args.write_rate} records/s to {bulk} "
        "until the connectors stop")
    began = time.monotonic()
    writer.start()
    try:
        if scheduled:
            run_id = local.trigger(args.airflow_url, "kafka_migration", conf)
            ok = local.wait_for_run(args.airflow_url, "kafka_migration", run_id, 3600) == "success"
            log = f"the run {run_id} in the UI at {args.airflow_url}"
        else:
            with log.open("w") as out:
                ok = subprocess.run([sys.executable, str(PROJECT_DIR / "stack" / "demo.py"), "--run-dag",
                                     json.dumps(conf)], stdout=out, stderr=subprocess.STDOUT,
                                    cwd=PROJECT_DIR).returncode == 0
    finally:
        writer.stop()
    elapsed = time.monotonic() - began
    _, summary = write_report(manifest)
    if not ok:
        raise SystemExit(f"bench-cutover: the {label} run failed; see {log}")
    result = {"label": label, "run": prefix, "bulk_mib": mib, "bulk_records": bulk_records,
              "live_records": writer.written, "value_bytes": summary["bytes"], "records": summary["records"],
              "downtime_s": summary["downtime_s"], "window": summary["window"],
              "pre_copy_rounds": summary["pre_copy_rounds"], "verified_records_pct": summary["verified_records_pct"],
              "partitions": summary["partitions"], "partitions_equal": summary["partitions_equal"],
              "groups_exact": summary["groups_exact"], "connectors_resumed": summary["connectors_resumed"],
              "run_s": round(elapsed, 1), "report": summary["report"], "timeline": summary.get("timeline_chart_path")}
    say(f"{label}: downtime {summary['downtime_s']} s, {summary['partitions_equal']} of {summary['partitions']} "
        f"partitions equal, {summary['verified_records_pct']} % of offsets verified, whole run {elapsed:.0f}s")
    for row in summary["window"]:
        say(f"{label}:   {row['step']:<22} {row['seconds']:6.2f} s")
    for name in (w.source_connector, w.sink_connector):
        for client in (source_connect, target_connect):
            if name in client.connectors():
                client.delete(name)
    for cluster in (SOURCE, TARGET):
        delete_topics(cluster, [*w.topics, bulk])
        delete_groups(cluster, w.groups)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small-mib", type=int, default=128)
    parser.add_argument("--large-mib", type=int, default=1216)
    parser.add_argument("--write-rate", type=int, default=200, help="records/s appended while the pre-copy runs")
    parser.add_argument("--converged-records", type=int, default=2000,
                        help="the run's pre_copy_converged_records param")
    parser.add_argument("--spark-remote", default=os.environ.get("KMIGRATE_SPARK_REMOTE") or "sc://127.0.0.1:15002",
                        help="the Spark Connect server the DAG's Spark jobs run on (sc://HOST:PORT), given to "
                             "Airflow as the connection spark_connect_default")
    parser.add_argument("--airflow-url", default=f"http://127.0.0.1:{local.UI_PORT}",
                        help="the Airflow of `make airflow-up` (scheduler, LocalExecutor) the scheduled run is "
                             "triggered on through its REST API")
    parser.add_argument("--scheduled-only", action="store_true", help="only the run through the scheduler")
    args = parser.parse_args()
    # the DAG runs (demo.py --run-dag, children) inherit the connections of this process's environment
    local.configure(AIRFLOW_HOME, local.connections("localhost:19092", "localhost:29092", SOURCE_CONNECT,
                                                    TARGET_CONNECT, spark_connect=args.spark_remote))
    local.migrate_db(AIRFLOW_HOME)
    scheduled = run_size("scheduled", args.small_mib, args, scheduled=True)
    between = next(row["seconds"] for row in scheduled["window"] if row["step"] == "between steps")
    if args.scheduled_only:
        print(json.dumps({"downtime_scheduler_s": scheduled["downtime_s"], "between_steps_s": between,
                          "scheduled": scheduled}))
        return 0
    small = run_size("small", args.small_mib, args)
    large = run_size("large", args.large_mib, args)
    out = {"machine": f"{platform.machine()}, {os.cpu_count()} cores",
           "downtime_scheduler_s": scheduled["downtime_s"], "between_steps_s": between,
           "downtime_small_s": small["downtime_s"], "downtime_large_s": large["downtime_s"],
           "data_ratio": round(large["value_bytes"] / small["value_bytes"], 2),
           "downtime_growth": round(large["downtime_s"] / small["downtime_s"], 3),
           "verified_records_pct": min(small["verified_records_pct"], large["verified_records_pct"]),
           "partitions_equal": small["partitions_equal"] + large["partitions_equal"],
           "partitions": small["partitions"] + large["partitions"],
           "scheduled": scheduled, "small": small, "large": large}
    (WORK_DIR / "result.json").write_text(json.dumps(out, indent=1))
    if large.get("timeline"):  # the larger run drawn as a timeline, for docs/BENCHMARKS.md
        shutil.copyfile(large["timeline"], PROJECT_DIR / "docs" / "bench_cutover_timeline.png")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
