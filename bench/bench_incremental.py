"""make bench-incremental: applications moved one at a time onto a running mirror's DR cluster, each in
its own small window, while the others keep writing and reading on the source; every DAG run through
the real scheduler of `make airflow-up` (triggered through its REST API).

The workload, --rate-mb MB/s of 1 KiB incompressible values in all over 24 partitions, each
application a producer and a consumer group on its own topic:
- `exactly-once`: a transactional producer (transactions of 50 records, every 5th aborted) on 8
  partitions, read by a read_committed consumer;
- `plain`: an idempotent producer on 15 partitions, read by a consumer that commits after each poll;
- `connect`: a Connect pipeline on 1 partition, a FileStreamSource reading a file the bench appends
  lines to, and a FileStreamSink writing the topic to a file (on the DR Connect cluster, to a file of
  its own).
kafka_dr_mirror mirrors the three topics and two groups. Once it caught up, the consumers move first, then the
producers, each order shuffled by --seed. A move: its DAG (kafka_move_consumers, kafka_move_producers)
is triggered; once its record shows in the mirror's run manifest (the move waits for the
application), the application is stopped on the source; as soon as the record says the move ended,
it is started on the DR cluster. Its window is the time from its stop to its start; the others run on
meanwhile (their longest gap between two acknowledgements or two reads in any window is reported).
The Connect pipeline's connectors are stopped and started by the move itself (its DAG's `connectors`):
its window is from the connector's move recorded as begun (before its stop) to recorded as ended
(after it runs on the DR Connect cluster).

Each consumer counts every record it reads, on either cluster: at the end (the producers stopped on
the DR cluster, the consumers read to its ends) `records_skipped` are the records visible on the DR
cluster (read_committed) that it never read, `records_repeated` those it read twice; for the
pipeline, the input file's lines missing from the two sink files, and those in them twice. Every partition
is compared with the source record by record up to where its topic was promoted (content digests).
Right after the first producer's move, a record is written on the source to its promoted topic on
purpose: `split_brain_detected` when the mirror's status names it. The last move ends the mirror
and releases its claims: `mirror_ended_by_last_move`, `claims_released`.

The big-bang window for comparison (`--no-big-bang` skips it): the same workload under new names,
mirrored, then every application stopped at once and moved by one planned failover
(kafka_dr_failover, quiesce 2 s): its window is from the stop of the last application to the
failover's run ended (all start on the DR cluster then).

Last line: one JSON object."""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from kmigrate.claims.log import claim_log
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.connect import ConnectClient
from kmigrate.kafka.records import partition_digest
from kmigrate.manifest import Manifest
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror.connector_moves import part as connector_part
from kmigrate.run.mirror.term import request_stop
from kmigrate.run.records.moves import part as group_part
from kmigrate.run.records.moves import topic_part

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "stack"))
import local_airflow as local  # noqa: E402

from common import PROJECT_DIR, SOURCE, TARGET, delete_groups, delete_topics, poll  # noqa: E402
from mm2 import TARGET_CONNECT_URL  # noqa: E402

SOURCE_CONNECT_URL = "http://localhost:18083"
FILES = PROJECT_DIR / ".stack" / "bench-incremental" / "files"

STATE = PROJECT_DIR / ".stack" / "bench-incremental" / "state"
GAP_S = 0.25  # a gap between two acknowledgements (or reads) of an application longer than this is kept


def say(line: str) -> None:
    print(f"bench-incremental: {line}", flush=True)


class App:
    """One application: a producer thread and a consumer thread, each on the cluster it was started on."""

    def __init__(self, name: str, topic: str, partitions: int, per_s: float, value_bytes: int, transactional: bool) -> None:
        self.name, self.topic, self.partitions = name, topic, partitions
        self.group = f"{topic}-readers"
        self.per_s, self.value_bytes, self.transactional = per_s, value_bytes, transactional
        self.read: dict[int, list[int]] = {}
        self.gaps: list[tuple[float, float]] = []  # (from, to) of each gap longer than GAP_S, either side
        self.producer: threading.Thread | None = None
        self.consumer: threading.Thread | None = None
        self.stop_producing, self.stop_consuming = threading.Event(), threading.Event()
        self.written = 0
        self.last_ack = self.last_read = 0.0
        self.started = 0  # producers started: each gets its own transactional id

    # producing
    def start_producer(self, cluster) -> None:  # noqa: ANN001
        self.stop_producing = threading.Event()
        self.started += 1
        self.producer = threading.Thread(target=self._produce, args=(cluster, self.stop_producing), daemon=True)
        self.producer.start()

    def stop_producer(self) -> float:
        """The producer stopped, its last transaction committed, every record acknowledged; when."""
        self.stop_producing.set()
        self.producer.join(60)
        return time.monotonic()

    def _acked(self, err, msg) -> None:  # noqa: ANN001
        if err is None:
            now = time.monotonic()
            if self.last_ack and now - self.last_ack > GAP_S:
                self.gaps.append((self.last_ack, now))
            self.last_ack = now

    def _produce(self, cluster, stopping: threading.Event) -> None:  # noqa: ANN001
        settings = {"linger.ms": 5, "enable.idempotence": True}
        if self.transactional:
            settings["transactional.id"] = f"{self.topic}-tx-{self.started}"
        producer = Producer(cluster.producer(**settings))
        if self.transactional:
            producer.init_transactions(60)
        began, i, open_ = time.monotonic(), 0, False
        while not stopping.is_set():
            due = int((time.monotonic() - began) * self.per_s)
            while i < due and not stopping.is_set():
                if self.transactional and not open_:
                    producer.begin_transaction()
                    open_ = True
                value = b"%s-%d-" % (self.name.encode(), i) + random.randbytes(self.value_bytes)
                producer.produce(self.topic, value, partition=i % self.partitions, on_delivery=self._acked)
                producer.poll(0)
                i += 1
                self.written += 1
                if self.transactional and i % 50 == 0:
                    if (i // 50) % 5 == 0:
                        producer.flush(60)  # librdkafka purges what is in flight on an abort
                        producer.abort_transaction(60)
                    else:
                        producer.commit_transaction(60)
                    open_ = False
            time.sleep(0.01)
        if open_:
            producer.commit_transaction(60)
        producer.flush(60)

    # consuming
    def start_consumer(self, cluster, **settings) -> None:  # noqa: ANN001, ANN003
        self.stop_consuming = threading.Event()
        self.consumer = threading.Thread(target=self._consume, args=(cluster, self.stop_consuming, settings), daemon=True)
        self.consumer.start()

    def stop_consumer(self) -> float:
        """The consumer closed (it left its group, its offsets committed); when."""
        self.stop_consuming.set()
        self.consumer.join(60)
        return time.monotonic()

    def _consume(self, cluster, stopping: threading.Event, settings: dict) -> None:  # noqa: ANN001
        isolation = "read_committed" if self.transactional else "read_uncommitted"
        consumer = Consumer(cluster.consumer(**{"group.id": self.group, "enable.auto.commit": False,
                                                "isolation.level": isolation, "session.timeout.ms": 6000,
                                                "auto.offset.reset": "earliest", **settings}))
        consumer.subscribe([self.topic])
        try:
            while not stopping.is_set():
                messages = [m for m in consumer.consume(500, 0.1) if not m.error()]
                if not messages:
                    continue
                consumer.commit(asynchronous=False)  # the positions after what this poll brought
                now = time.monotonic()
                if self.last_read and now - self.last_read > GAP_S:
                    self.gaps.append((self.last_read, now))
                self.last_read = now
                for message in messages:
                    self.read.setdefault(message.partition(), []).append(message.offset())
        finally:
            consumer.close()

    def keys(self) -> list[tuple[str, int]]:
        return [(self.topic, p) for p in range(self.partitions)]


class ConnectApp:
    """A Connect pipeline: a file the bench appends lines to, a FileStreamSource writing them to a
    topic of one partition, a FileStreamSink writing the topic to a file. Its connectors are stopped
    and started by the moves."""

    transactional = False
    partitions = 1

    def __init__(self, prefix: str, per_s: float) -> None:
        self.name, self.topic, self.per_s = "connect", f"{prefix}.lines", per_s
        self.source_name, self.sink_name = f"{prefix}-lines-source", f"{prefix}-lines-sink"
        FILES.mkdir(parents=True, exist_ok=True)
        self.given, self.on_source, self.on_dr = (FILES / f"{prefix}-{n}.txt" for n in ("in", "out-source", "out-dr"))
        self.given.touch()
        self.gaps: list[tuple[float, float]] = []
        self.stopping = threading.Event()
        self.written = 0
        self.clients = (ConnectClient(SOURCE_CONNECT_URL), ConnectClient(TARGET_CONNECT_URL))
        self.group = f"connect-{self.sink_name}"  # the sink connector's consumer group

    def keys(self) -> list[tuple[str, int]]:
        return [(self.topic, 0)]

    def start(self) -> None:
        source, _ = self.clients
        source.create(self.source_name, {"connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
                                         "tasks.max": "1", "file": str(self.given), "topic": self.topic})
        source.create(self.sink_name, {"connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
                                       "tasks.max": "1", "file": str(self.on_source), "topics": self.topic})
        threading.Thread(target=self._append, daemon=True).start()

    def _append(self) -> None:
        began = time.monotonic()
        with self.given.open("a") as out:
            while not self.stopping.wait(0.01):
                due = int((time.monotonic() - began) * self.per_s)
                while self.written < due:
                    out.write(f"line-{self.written}\n")
                    self.written += 1
                out.flush()

    def lines(self) -> tuple[list[str], list[str]]:
        """(the input's lines, the two sink files' lines, the source's first)."""
        read = lambda path: path.read_text().splitlines() if path.exists() else []  # noqa: E731
        return read(self.given), read(self.on_source) + read(self.on_dr)

    def window(self, manifest: Manifest, connector: str) -> float:
        record = manifest.read(connector_part(connector))
        return _epoch(record["ended"]) - _epoch(record["began"])

    def cleanup(self) -> None:
        self.stopping.set()
        for client in self.clients:
            for name in (self.source_name, self.sink_name):
                if name in client.connectors():
                    client.delete(name)


def _epoch(at: str) -> float:
    import datetime

    return datetime.datetime.fromisoformat(at).timestamp()


def workload(prefix: str, rate_mb: float, value_bytes: int) -> list:
    per_s = rate_mb * 1e6 / value_bytes
    apps = [App("exactly-once", f"{prefix}.payments", 8, per_s * 0.3, value_bytes, transactional=True),
            App("plain", f"{prefix}.clicks", 15, per_s * 0.7, value_bytes, transactional=False),
            ConnectApp(prefix, 200.0)]
    with ClusterAdmin(SOURCE) as admin:
        for app in apps:
            admin.create_topic(app.topic, app.partitions, {})
        admin.wait_for_topics({app.topic: app.partitions for app in apps})
    return apps


def start(app, cluster) -> None:  # noqa: ANN001
    if isinstance(app, ConnectApp):
        app.start()
    else:
        app.start_producer(cluster)
        app.start_consumer(cluster)


def start_mirror(args: argparse.Namespace, prefix: str, apps: list[App]) -> tuple[str, Manifest]:
    pattern = re.escape(prefix) + r"\..*"
    run = local.trigger(args.airflow_url, "kafka_dr_mirror", {"run_name": prefix, "topics_include": pattern,
                                                              "groups": pattern, "state_location": str(STATE)})
    manifest = Manifest(str(STATE), prefix)
    poll(lambda: (mirror_status.read(manifest) or {}).get("round", 0) >= 1, "the mirror's first status", 300)
    return run, manifest


def caught_up(manifest: Manifest, apps: list[App], within: int = 5000) -> bool:
    status = mirror_status.read(manifest) or {}
    rows = {(p["topic"], p["partition"]): p for p in status.get("partitions", [])}
    keys = [k for app in apps for k in app.keys()]
    return all(k in rows for k in keys) and sum(rows[k]["behind_records"] for k in keys) < within


def move_consumer(args: argparse.Namespace, manifest: Manifest, app: App) -> dict:
    if isinstance(app, ConnectApp):
        return move_connector(args, manifest, app, "consumer")
    run = local.trigger(args.airflow_url, "kafka_move_consumers", {
        "run_name": manifest.run_id, "state_location": str(STATE), "move_groups": [app.group], "move_wait_s": 300})
    poll(lambda: manifest.exists(group_part(app.group)), f"the move of {app.group} to begin", 300)
    stopped = app.stop_consumer()
    poll(lambda: (manifest.read(group_part(app.group)) or {}).get("state") == "moved", f"{app.group} moved", 300,
         every_s=0.02)
    app.start_consumer(TARGET, **{"auto.offset.reset": "error"})  # no committed offset there: an error, not a guess
    started = time.monotonic()
    state = local.wait_for_run(args.airflow_url, "kafka_move_consumers", run, 300)
    say(f"  {app.name}'s consumer moved: stopped {started - stopped:.2f} s (its DAG run: {state})")
    return {"app": app.name, "what": "consumer", "window_s": round(started - stopped, 3), "run": state,
            "from": stopped, "to": started}


def move_connector(args: argparse.Namespace, manifest: Manifest, app: ConnectApp, what: str) -> dict:
    """The pipeline's sink connector moved with the consumers (`what`: consumer) or its source connector
    with the producers (producer) by the move's DAG, which stops and starts it; its window from its
    move's record."""
    if what == "consumer":
        dag, connector, kind = "kafka_move_consumers", app.sink_name, "sink"
        conf = {"connector_overrides": {app.sink_name: {"file": str(app.on_dr)}}}
    else:
        dag, connector, kind = "kafka_move_producers", app.source_name, "source"
        conf = {"move_topics": [app.topic], "move_quiet_s": args.quiet_s}
    run = local.trigger(args.airflow_url, dag, {"run_name": manifest.run_id, "state_location": str(STATE),
                                                "connectors": [connector], "move_wait_s": 300, **conf})
    state = local.wait_for_run(args.airflow_url, dag, run, 300)
    window = app.window(manifest, connector)
    say(f"  {app.name}'s {kind} connector moved: stopped {window:.2f} s (its DAG run: {state})")
    now = time.monotonic()
    return {"app": app.name, "what": what, "window_s": round(window, 3), "run": state, "from": now - window, "to": now}


def move_producer(args: argparse.Namespace, manifest: Manifest, app: App) -> dict:
    if isinstance(app, ConnectApp):
        return move_connector(args, manifest, app, "producer")
    run = local.trigger(args.airflow_url, "kafka_move_producers", {
        "run_name": manifest.run_id, "state_location": str(STATE), "move_topics": [app.topic],
        "move_quiet_s": args.quiet_s, "move_wait_s": 300})
    poll(lambda: manifest.exists(topic_part(app.topic)), f"the promotion of {app.topic} to begin", 300)
    stopped = app.stop_producer()
    poll(lambda: "ended" in (manifest.read(topic_part(app.topic)) or {}), f"{app.topic} promoted", 300, every_s=0.02)
    app.start_producer(TARGET)
    started = time.monotonic()
    state = local.wait_for_run(args.airflow_url, "kafka_move_producers", run, 300)
    say(f"  {app.name}'s producer moved: stopped {started - stopped:.2f} s (its DAG run: {state})")
    return {"app": app.name, "what": "producer", "window_s": round(started - stopped, 3), "run": state,
            "from": stopped, "to": started}


def visible_offsets(cluster, topic: str, partition: int, end: int) -> list[int]:  # noqa: ANN001
    """The offsets a read_committed consumer reads in [0, end)."""
    consumer = Consumer(cluster.consumer(**{"group.id": f"bench-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False,
                                            "isolation.level": "read_committed", "enable.partition.eof": True}))
    consumer.assign([TopicPartition(topic, partition, 0)])
    out: list[int] = []
    try:
        while True:
            batch = consumer.consume(1000, 5.0)
            if not batch:
                break
            done = False
            for message in batch:
                if message.error():
                    done = True  # the partition's end
                    continue
                if message.offset() >= end:
                    done = True
                    break
                out.append(message.offset())
            if done:
                break
    finally:
        consumer.close()
    return out


def account(app: App) -> dict:
    """Skipped and repeated records of `app`'s consumer against the DR cluster's visible records
    (the pipeline's: the input's lines against the sink files')."""
    if isinstance(app, ConnectApp):
        given, out = app.lines()
        return {"skipped": len(set(given) - set(out)), "repeated": len(out) - len(set(out)), "read": len(out)}
    with ClusterAdmin(TARGET) as admin:
        ends = admin.end_offsets(app.keys())
    skipped = repeated = 0
    for topic, p in app.keys():
        visible = visible_offsets(TARGET, topic, p, ends[(topic, p)])
        read = app.read.get(p, [])
        repeated += len(read) - len(set(read))
        skipped += len(set(visible) - set(read))
    return {"skipped": skipped, "repeated": repeated, "read": sum(map(len, app.read.values()))}


def equal_up_to_promotion(manifest: Manifest, app: App) -> int:
    """Partitions of `app`'s topic whose records up to the promoted end are equal on both clusters."""
    ends = (manifest.read(topic_part(app.topic)) or {}).get("ends", {})
    equal = 0
    for topic, p in app.keys():
        end = ends[str(p)]
        source = partition_digest(SOURCE, topic, p, 0, end)
        target = partition_digest(TARGET, topic, p, 0, end)
        equal += source.hexdigest() == target.hexdigest()
    return equal


def others_longest_gap(apps: list[App], moves: list[dict]) -> float:
    """The longest gap of an application's acknowledgements or reads inside another's move window."""
    longest = 0.0
    for move in moves:
        for app in apps:
            if app.name == move["app"]:
                continue
            for begin, end in app.gaps:
                overlap = min(end, move["to"]) - max(begin, move["from"])
                if overlap > 0:
                    longest = max(longest, end - begin)
    return round(longest, 3)


def split_brain(manifest: Manifest, app: App) -> dict | None:
    """A record written on the source to `app`'s promoted topic; the mirror's status row naming it."""
    producer = Producer(SOURCE.producer())
    producer.produce(app.topic, b"split brain, on purpose", partition=0)
    producer.flush(30)

    def named():
        status = mirror_status.read(manifest) or {}
        rows = [r for r in status.get("promoted", []) if r["topic"] == app.topic and r["split_brain"]]
        return rows[0] if rows else None

    return poll(named, "the mirror to name the split brain", 60)


def big_bang(args: argparse.Namespace) -> dict:
    """The same workload under new names, moved by one planned failover with every application stopped."""
    prefix = f"bbi{uuid.uuid4().hex[:6]}"
    apps = workload(prefix, args.rate_mb, args.value_bytes)
    run, manifest = start_mirror(args, prefix, apps)
    try:
        for app in apps:
            start(app, SOURCE)
        time.sleep(args.load_s)  # the workload's running time before the window (a load, not a wait for a condition)
        poll(lambda: caught_up(manifest, apps), "the mirror caught up", 300)
        plain = [a for a in apps if isinstance(a, App)]
        [pipeline] = [a for a in apps if isinstance(a, ConnectApp)]
        for app in plain:
            app.stop_consumer()
        pipeline.stopping.set()  # its connectors are the failover's to stop
        stopped = max(app.stop_producer() for app in plain)
        failover = local.trigger(args.airflow_url, "kafka_dr_failover", {
            "run_name": prefix, "state_location": str(STATE), "quiesce_seconds": 2,
            "connectors": [pipeline.source_name, pipeline.sink_name],
            "connector_overrides": {pipeline.sink_name: {"file": str(pipeline.on_dr)}}})
        state = local.wait_for_run(args.airflow_url, "kafka_dr_failover", failover, 900)
        window = time.monotonic() - stopped
        local.wait_for_run(args.airflow_url, "kafka_dr_mirror", run, 120)
        say(f"big bang: every application stopped {window:.2f} s (the planned failover: {state})")
        return {"window_s": round(window, 3), "run": state}
    finally:
        cleanup(apps)
        request_stop(manifest, "bench-incremental is done")
        poll(lambda: (mirror_status.read(manifest) or {"stopped": True})["stopped"], "the mirror to stop", 120)
        delete_topics(SOURCE, [a.topic for a in apps])
        delete_topics(TARGET, [a.topic for a in apps])
        for cluster in (SOURCE, TARGET):
            delete_groups(cluster, [a.group for a in apps])


def cleanup(apps: list) -> None:
    for app in apps:
        if isinstance(app, ConnectApp):
            app.cleanup()
        else:
            app.stop_producing.set()
            app.stop_consuming.set()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate-mb", type=float, default=2.0)
    parser.add_argument("--value-bytes", type=int, default=1024)
    parser.add_argument("--load-s", type=float, default=30.0, help="the load's time between two moves")
    parser.add_argument("--quiet-s", type=float, default=1.0, help="move_quiet_s of the producers' moves")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--no-big-bang", action="store_true")
    parser.add_argument("--airflow-url", default=f"http://127.0.0.1:{local.UI_PORT}")
    args = parser.parse_args()
    out, ok = incremental(args)
    # one mirror run at a time (kafka_dr_mirror's): the big bang's mirror after the first one stopped
    bang = {} if args.no_big_bang else big_bang(args)
    out["big_bang_window_s"], out["big_bang_run"] = bang.get("window_s"), bang.get("run")
    print(json.dumps(out))
    return 0 if ok and bang.get("run", "success") == "success" else 1


def incremental(args: argparse.Namespace) -> tuple[dict, bool]:
    """The applications moved one at a time: the result, and whether it holds (nothing skipped or
    repeated, every partition equal, every move's run a success, the split brain named)."""
    rng = random.Random(args.seed)
    prefix = f"inc{uuid.uuid4().hex[:6]}"
    apps = workload(prefix, args.rate_mb, args.value_bytes)
    mirror_run, manifest = start_mirror(args, prefix, apps)
    moves: list[dict] = []
    try:
        say(f"{len(apps)} applications on {sum(a.partitions for a in apps)} partitions, {args.rate_mb} MB/s, mirrored "
            f"by kafka_dr_mirror run {prefix}")
        for app in apps:
            start(app, SOURCE)
        began = time.monotonic()
        poll(lambda: sum(a.written for a in apps) > 1000, "the load to start", 60)
        time.sleep(args.load_s)  # the workload's running time before the first move (a load, not a wait)
        poll(lambda: caught_up(manifest, apps), "the mirror caught up", 300)
        consumers, producers = rng.sample(apps, len(apps)), rng.sample(apps, len(apps))
        say("order: consumers of " + ", ".join(a.name for a in consumers) + ", then producers of "
            + ", ".join(a.name for a in producers))
        for app in consumers:
            moves.append(move_consumer(args, manifest, app))
            time.sleep(args.load_s)  # the others' running time between two moves
        named = None
        for app in producers:
            moves.append(move_producer(args, manifest, app))
            if named is None and isinstance(app, App):  # while the others still run on the source
                named = split_brain(manifest, app)
                say(f"split brain named: {named}")
            time.sleep(args.load_s)
        # the last move ended the mirror and released its claims on the DR cluster
        ended = (mirror_status.read(manifest) or {}).get("stopped", False)
        claimed = any(r["run"] == manifest.run_id for r in claim_log(TARGET).current().runs.values())
        say(f"after the last move: the mirror {'stopped' if ended else 'still runs'}, its claims "
            f"{'still held' if claimed else 'released'}")
        seconds = time.monotonic() - began
        written = sum(a.written for a in apps if isinstance(a, App))
        plain = [a for a in apps if isinstance(a, App)]
        [pipeline] = [a for a in apps if isinstance(a, ConnectApp)]
        pipeline.stopping.set()
        for app in plain:  # the producers stop on the DR cluster; the consumers read to its ends
            app.stop_producer()
        with ClusterAdmin(TARGET) as admin:
            ends = admin.end_offsets([k for a in plain for k in a.keys()])

        def read_to_the_end() -> bool:
            given, out = pipeline.lines()
            return len(out) >= len(given) and all(max(a.read.get(p, [-1])) + 1 >= ends[(t, p)] - 1
                                                  for a in plain for t, p in a.keys())

        poll(read_to_the_end, "the consumers to read to the DR cluster's ends", 120)
        time.sleep(1.0)  # a last poll's worth: records past a last commit marker (a load, not a wait)
        for app in plain:
            app.stop_consumer()
        accounts = {a.name: account(a) for a in apps}
        equal = sum(equal_up_to_promotion(manifest, a) for a in apps)
        windows = {kind: [m["window_s"] for m in moves if m["what"] == kind] for kind in ("consumer", "producer")}
        out = {"apps_moved": len(apps), "partitions": sum(a.partitions for a in apps),
               "mb_per_s": round(written * (args.value_bytes + 20) / seconds / 1e6, 2),
               "records_read": sum(a["read"] for a in accounts.values()),
               "records_skipped": sum(a["skipped"] for a in accounts.values()),
               "records_repeated": sum(a["repeated"] for a in accounts.values()),
               **{f"{kind}_move_window_s": {"median": round(statistics.median(w), 3), "max": max(w)}
                  for kind, w in windows.items()},
               "others_paused_s": 0, "others_longest_gap_s": others_longest_gap(apps, moves),
               "partitions_equal": equal, "split_brain_detected": bool(named), "split_brain": named,
               "mirror_ended_by_last_move": ended, "claims_released": not claimed,
               "move_runs": [m["run"] for m in moves], "quiet_s": args.quiet_s, "seed": args.seed}
        ok = (out["records_skipped"] == 0 and out["records_repeated"] == 0 and equal == out["partitions"]
              and all(m["run"] == "success" for m in moves) and bool(named) and ended and not claimed)
        return out, ok
    finally:
        cleanup(apps)
        request_stop(manifest, "bench-incremental is done")
        poll(lambda: (mirror_status.read(manifest) or {"stopped": True})["stopped"], "the mirror to stop", 120)
        local.wait_for_run(args.airflow_url, "kafka_dr_mirror", mirror_run, 120)
        delete_topics(SOURCE, [a.topic for a in apps])
        delete_topics(TARGET, [a.topic for a in apps])
        for cluster in (SOURCE, TARGET):
            delete_groups(cluster, [a.group for a in apps])


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
