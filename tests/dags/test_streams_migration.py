"""A Kafka Streams exactly-once application that this project did not write (Apache Kafka's own
WordCountDemo, from org.apache.kafka:kafka-streams-examples on Maven Central) moved by the
kafka_migration DAG: stopped mid-stream right before the run, with its default session timeout (it
does not leave its group when it closes), migrated with the default quiesce, then started on the
target with an empty state directory. Every count it outputs, on either cluster, must be what one
uninterrupted run gives: for each word 1, 2, ..., n in order, none repeated, none skipped."""
from __future__ import annotations

import collections
import os
import random
import re
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient
from kmigrate.claims.log import claim_log
from kmigrate.claims.runs import release_topics
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.records import read_range
from kmigrate.manifest import Manifest
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror.completion import WHY
from kmigrate.run.mirror.spec import MirrorSpec, write_spec
from kmigrate.run.mirror.term import STOP

from tests.support.airflow import run_dag, task_states
from tests.support.kafka import create_topic, records_of
from tests.support.mirror import mirrored
from tests.support.stack import PROJECT_DIR
from tests.support.waiting import wait_until

INPUT, OUTPUT = "streams-plaintext-input", "streams-wordcount-output"  # WordCountDemo's own topic names
RENAMED = "moved."  # the prefix of an application's id and internal topics when a run renames them
WORDS = ["kafka", "offset", "stream", "topic", "record", "broker", "replica", "leader", "commit", "window",
         "state", "store", "count", "word", "table", "join", "merge", "split", "batch", "marker"]


def _streams_examples():
    import importlib.util

    spec = importlib.util.spec_from_file_location("kmigrate_streams_examples", PROJECT_DIR / "stack" / "streams_examples.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def drop_topics(cluster, names_or_prefix) -> None:
    """Delete the topics left by an earlier run of this test, and wait until they are gone."""
    admin = AdminClient(cluster.admin())
    existing = [t for t in admin.list_topics(timeout=10).topics if names_or_prefix(t)]
    if not existing:
        return
    for future in admin.delete_topics(existing, operation_timeout=30).values():
        try:
            future.result(30)
        except KafkaException:
            pass
    wait_until(lambda: not any(names_or_prefix(t) for t in admin.list_topics(timeout=10).topics),
               "the old topics to be deleted")


class WordCount:
    """WordCountDemo in its own JVM, exactly once, against one cluster; stopped with SIGTERM (its
    shutdown hook closes Kafka Streams, which does not leave the group)."""

    def __init__(self, examples, cluster, app_id: str, workdir: Path, extra: str = "") -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        props = workdir / "streams.properties"
        props.write_text(f"application.id={app_id}\nbootstrap.servers={cluster.bootstrap_servers}\n"
                         f"processing.guarantee=exactly_once_v2\nstate.dir={workdir / 'state'}\n"
                         "replication.factor=1\n" + extra)
        self.log = workdir / "wordcount.log"
        with open(self.log, "w") as out:
            self.process = subprocess.Popen(examples.command(examples.WORDCOUNT, str(props)), stdout=out,
                                            stderr=subprocess.STDOUT)

    def tail(self, lines: int = 40) -> str:
        """The end of the app's log (slf4j-simple, INFO and up), to say what it did."""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def wait(self, condition, what: str, timeout_s: float):  # noqa: ANN001
        """wait_until for a condition on what this app does: ends at once, with the app's log, when the
        app has exited; a time-out says the log's end too."""

        def attempt():
            if self.process.poll() is not None:
                raise AssertionError(f"WordCountDemo exited ({self.process.returncode}) before {what}; "
                                     f"its log ends:\n{self.tail()}")
            return condition()

        try:
            return wait_until(attempt, what, timeout_s)
        except AssertionError as exc:
            if "timed out" in str(exc):
                raise AssertionError(f"{exc}; WordCountDemo's log ends:\n{self.tail()}") from None
            raise

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(30)


def produce_lines(cluster, rng: random.Random, lines: int, counts: collections.Counter) -> None:
    producer = Producer(cluster.producer(**{"enable.idempotence": True, "linger.ms": 5}))
    for _ in range(lines):
        words = [rng.choice(WORDS) for _ in range(rng.randint(3, 8))]
        counts.update(words)
        producer.produce(INPUT, value=" ".join(words).encode(), key=None)
        producer.poll(0)
    assert producer.flush(30) == 0


def consumed_all(cluster, group: str) -> bool:
    with ClusterAdmin(cluster) as admin:
        ends = admin.end_offsets([(INPUT, 0), (INPUT, 1)])
        committed = admin.committed_offsets(group)
    return all(committed.get(tp) == end for tp, end in ends.items())


def counts_output(cluster) -> dict[str, list[int]]:
    """Each word's counts in the order WordCountDemo wrote them (a word's counts are in one partition)."""
    out: dict[str, list[int]] = collections.defaultdict(list)
    with ClusterAdmin(cluster) as admin:
        marks = admin.watermarks_of([(OUTPUT, 0), (OUTPUT, 1)])
    for (topic, partition), (low, high) in marks.items():
        for msg in read_range(cluster, topic, partition, low, high):
            out[msg.key().decode()].append(int.from_bytes(msg.value(), "big", signed=True))
    return out


def ours_topic(name: str) -> bool:
    """WordCountDemo's fixed topics and the internal ones of this module's apps (renamed ones too)."""
    return name in (INPUT, OUTPUT) or name.startswith(("wordcount-", f"{RENAMED}wordcount-"))


def fresh_topics(stack, app: str) -> None:  # noqa: ANN001
    """The input and output topics new on the source, nothing of an earlier run left on either cluster
    (its topics, or its claims of an app that did not finish)."""
    for cluster in (stack.source, stack.target):
        drop_topics(cluster, ours_topic)
    held = claim_log(stack.target).current()
    for key in held.conflicts(app, [INPUT, OUTPUT]):  # an earlier run of this test that did not finish
        release_topics(stack.target, held.runs[key]["run"], deployment=held.runs[key]["deployment"], force=True)
    create_topic(stack.source, INPUT, 2)
    create_topic(stack.source, OUTPUT, 2)


def assert_counted_once(cluster, counts: collections.Counter) -> None:  # noqa: ANN001
    """Every word's counts on `cluster` are 1, 2, ..., n in order, n its count in every line written."""
    output = counts_output(cluster)
    assert set(output) == set(counts)
    wrong = {w: (seen[:3], seen[-3:], counts[w]) for w, seen in output.items() if seen != list(range(1, counts[w] + 1))}
    assert not wrong, f"counts repeated or skipped (first, last, expected total): {wrong}"


def stopped_mid_stream(stack, examples, app: str, rng: random.Random, counts: collections.Counter, workdir: Path,
                       apps: list[WordCount]) -> WordCount:
    """WordCountDemo on the source over 300 lines, then stopped with 100 more written, some of them
    not processed yet: the app as a run finds it. Added to `apps` (the test stops them all)."""
    produce_lines(stack.source, rng, 300, counts)
    on_source = WordCount(examples, stack.source, app, workdir)
    apps.append(on_source)
    on_source.wait(lambda: consumed_all(stack.source, app), "WordCountDemo to process the first lines", 180)
    produce_lines(stack.source, rng, 100, counts)  # mid-stream: the app stops with some of these unprocessed
    on_source.stop()
    return on_source


@pytest.fixture
def examples():
    return _streams_examples()


def test_a_kafka_streams_exactly_once_app_stopped_right_before_the_run_continues_exactly(
        stack, dagbag, tmp_path, examples):
    app = f"wordcount-{uuid.uuid4().hex[:6]}"
    fresh_topics(stack, app)
    rng, counts = random.Random(7), collections.Counter()
    apps: list[WordCount] = []
    try:
        on_source = stopped_mid_stream(stack, examples, app, rng, counts, tmp_path / "source-app", apps)
        with ClusterAdmin(stack.source) as admin:
            assert admin.live_members(app), "Kafka Streams left its group on close (the case this test is about)"

        started = time.monotonic()
        run = run_dag(dagbag, topics_include=f"{INPUT}|{OUTPUT}|{app}-.*", groups=app,
                      state_location=str(tmp_path / "state"), run_name=app)  # default quiesce_seconds
        assert str(run.state) == "success", task_states(run)
        assert time.monotonic() - started < 240

        on_target = WordCount(examples, stack.target, app, tmp_path / "target-app")  # an empty state directory
        apps.append(on_target)
        produce_lines(stack.target, rng, 100, counts)
        on_target.wait(lambda: {w: c[-1] for w, c in counts_output(stack.target).items()} == dict(counts),
                       "WordCountDemo on the target to count every line", 180)
    finally:
        for process in apps:
            process.stop()
    assert_counted_once(stack.target, counts)
    for cluster in (stack.source, stack.target):  # leave the fixed topic names free for the next run
        drop_topics(cluster, ours_topic)
    assert os.path.exists(on_source.log)


def test_a_kafka_streams_exactly_once_app_moved_under_a_renamed_application_id_continues_exactly(
        stack, dagbag, tmp_path, examples):
    """The same app moved by a consolidation: its internal topics and its group (its application id)
    renamed alike by one prefix, its input and output topics kept under their names (WordCountDemo
    names them in its code). Started on the target under the new application id, with an empty state
    directory, it restores its store from the renamed changelog and counts on exactly once."""
    app = f"wordcount-{uuid.uuid4().hex[:6]}"
    fresh_topics(stack, app)
    rng, counts = random.Random(13), collections.Counter()
    apps: list[WordCount] = []
    try:
        stopped_mid_stream(stack, examples, app, rng, counts, tmp_path / "source-app", apps)
        with ClusterAdmin(stack.source) as admin:
            internal = sorted(t for t in admin.list_topics() if t.startswith(f"{app}-"))
        assert len(internal) == 2, internal  # its changelog and its repartition topic

        run = run_dag(dagbag, topics_include=f"{INPUT}|{OUTPUT}|{app}-.*", groups=app, acls="off",
                      topic_prefix=RENAMED, topic_renames={INPUT: INPUT, OUTPUT: OUTPUT}, group_prefix=RENAMED,
                      state_location=str(tmp_path / "state"), run_name=app)
        assert str(run.state) == "success", task_states(run)
        with ClusterAdmin(stack.target) as admin:
            on_target = set(admin.list_topics())
            assert {f"{RENAMED}{t}" for t in internal} <= on_target and not on_target & set(internal)
            assert not admin.committed(app) and admin.committed(f"{RENAMED}{app}")

        moved = WordCount(examples, stack.target, f"{RENAMED}{app}", tmp_path / "target-app")  # empty state
        apps.append(moved)
        produce_lines(stack.target, rng, 100, counts)
        moved.wait(lambda: {w: c[-1] for w, c in counts_output(stack.target).items()} == dict(counts),
                   "WordCountDemo on the target, under its new id, to count every line", 180)
        with ClusterAdmin(stack.target) as admin:  # it made no internal topic of its own: the renamed ones are its
            assert sorted(t for t in admin.list_topics() if t.startswith(f"{RENAMED}{app}-")) == [
                f"{RENAMED}{t}" for t in internal]
    finally:
        for process in apps:
            process.stop()
    assert_counted_once(stack.target, counts)
    for cluster in (stack.source, stack.target):
        drop_topics(cluster, ours_topic)


class LineWriter(threading.Thread):
    """Lines of words written to the input topic on `cluster` until stopped, each word counted once
    its line is acknowledged: the input's producer, which keeps running while the app moves."""

    def __init__(self, cluster, rng: random.Random, counts: collections.Counter, per_s: float = 50.0) -> None:
        super().__init__(daemon=True)
        self.cluster, self.rng, self.counts, self.per_s = cluster, rng, counts, per_s
        self.stopping, self.failures = threading.Event(), []

    def run(self) -> None:
        producer = Producer(self.cluster.producer(**{"enable.idempotence": True, "linger.ms": 5}))

        def acked(err, msg) -> None:  # noqa: ANN001
            if err is not None:
                self.failures.append(err)
            else:
                self.counts.update(msg.value().decode().split())

        while not self.stopping.wait(1 / self.per_s):
            line = " ".join(self.rng.choice(WORDS) for _ in range(self.rng.randint(3, 8)))
            producer.produce(INPUT, value=line.encode(), on_delivery=acked)
            producer.poll(0)
        assert producer.flush(30) == 0

    def stop(self) -> None:
        self.stopping.set()
        self.join(60)
        assert not self.failures, self.failures


def test_a_kafka_streams_app_moved_as_one_onto_a_running_mirror_continues_exactly(stack, dagbag, tmp_path, examples):
    """WordCountDemo moved as one application onto the DR cluster of a running mirror while its input's
    producer keeps writing on the source: stopped there, its output and internal topics (changelog,
    repartition) promoted by kafka_move_producers, its group moved by kafka_move_consumers, then started
    on the DR cluster with an empty state directory: it reads the input the mirror goes on copying, at
    its group's offsets, and restores its counts from the promoted changelog. Then the input's producer
    moves too, the last move: the mirror ends and its claims on the DR cluster are released. Every
    count, on either cluster, is what one uninterrupted run gives."""
    app = f"wordcount-{uuid.uuid4().hex[:6]}"
    fresh_topics(stack, app)
    state, rng, counts = tmp_path / "state", random.Random(11), collections.Counter()
    manifest = Manifest(str(state), app)
    spec = write_spec(manifest, MirrorSpec(f"{INPUT}|{OUTPUT}|{re.escape(app)}-.*", groups=re.escape(app),
                                           interval_s=0.5, refresh_s=2.0, term_s=60.0))  # as the start task writes it
    writer = LineWriter(stack.source, rng, counts)
    # a member that goes without leaving its group (Kafka Streams on close) is gone after 10 s, not 45
    quick = "session.timeout.ms=10000\n"
    apps = [WordCount(examples, stack.source, app, tmp_path / "source-app", quick)]
    try:
        with mirrored(stack, manifest, spec):
            writer.start()
            apps[0].wait(lambda: sum(counts.values()) > 500 and consumed_all(stack.source, app),
                         "WordCountDemo on the source to process the first lines", 180)
            with ClusterAdmin(stack.source) as admin:
                internal = sorted(t for t in admin.list_topics() if t.startswith(f"{app}-"))
                partitions = admin.partition_counts([INPUT, OUTPUT, *internal])
                ends = admin.end_offsets([(t, p) for t, n in partitions.items() for p in range(n)])
            assert len(internal) == 2, internal  # its changelog and its repartition topic

            def copied() -> bool:  # the mirror holds every topic of the app up to the ends of now (they grow on)
                status = mirror_status.read(manifest)  # none before the mirror's first status round
                dr = {(p["topic"], p["partition"]): p["dr_end"] for p in (status or {}).get("partitions", [])}
                return all(dr.get(k, -1) >= end for k, end in ends.items())
            wait_until(copied, "the mirror to copy the app's topics", 120)

            apps[0].stop()  # the application stops on the source; its input's producer goes on there
            moved = run_dag(dagbag, "kafka_move_producers", run_name=app, state_location=str(state),
                            move_topics=[OUTPUT, *internal], move_quiet_s=1.0, move_wait_s=120)
            assert task_states(moved) == {"move_producers": "success"}, task_states(moved)
            moved = run_dag(dagbag, "kafka_move_consumers", run_name=app, state_location=str(state),
                            move_groups=[app], move_wait_s=120)
            assert task_states(moved) == {"move_consumers": "success"}, task_states(moved)
            assert not mirror_status.read(manifest)["stopped"]  # its input is still on the source
            apps.append(WordCount(examples, stack.target, app, tmp_path / "target-app", quick))  # empty state

            wait_until(lambda: sum(counts.values()) > 2 * 500, "more lines written on the source", 60)
            writer.stop()  # the input's producer moves: it stops on the source...
            last = run_dag(dagbag, "kafka_move_producers", run_name=app, state_location=str(state),
                           move_topics=[INPUT], move_quiet_s=1.0, move_wait_s=120)
            assert task_states(last) == {"move_producers": "success"}, task_states(last)
            # ...the last move: nothing of the run is left on the source, the mirror ended, its claims released
            assert mirror_status.read(manifest)["stopped"] and manifest.read(STOP)["why"] == WHY
            assert not [r for r in claim_log(stack.target).current().runs.values() if r["run"] == app]
        produce_lines(stack.target, rng, 100, counts)  # ...and starts on the DR cluster
        apps[1].wait(lambda: {w: c[-1] for w, c in counts_output(stack.target).items()} == dict(counts),
                     "WordCountDemo on the DR cluster to count every line", 180)
    finally:
        writer.stopping.set()
        for process in apps:
            process.stop()
    assert_counted_once(stack.target, counts)
    for topic in (INPUT, OUTPUT, *internal):  # what the source holds, the DR cluster holds at the same offsets
        for partition in range(partitions[topic]):
            on_source = records_of(stack.source, topic, partition)
            assert records_of(stack.target, topic, partition)[:len(on_source)] == on_source, (topic, partition)
    for cluster in (stack.source, stack.target):  # leave the fixed topic names free for the next run
        drop_topics(cluster, ours_topic)
