"""An unplanned failover through kafka_dr_failover (unplanned) on the real stack: a one-broker source
of the test's own (ports 19792-19793, Airflow connection lone_kafka_source) mirrored to the stack's
target while a transactional and an idempotent producer write and the source's Connect worker runs a
file source and a file sink connector; the broker and the worker killed with SIGKILL, the DR cluster
promoted with what it holds; then the source started again, and what the failover lost named
partition by partition. Every record the DR cluster holds is the source's at its offset; the group
lies within the DR ends; no transaction is left open; the report gives the RPO. The connectors run on
the DR Connect cluster from the mirror's last safe reading: the source connector skips no line of
its file, the sink connector writes every record the DR cluster holds.

Then the failback: the applications write on the DR cluster, the diverged partitions are refused by
name until rebuild is asked, their topics are rebuilt on the original by a mirror from the DR
cluster, and a planned failover of that mirror (kafka_dr_failover, the DR cluster its source) brings
the original back as primary with every record at its offset and the group where it was on the DR
cluster: a consumer continues there with nothing read twice or skipped. The original's Connect worker,
started again, resumes its stale connectors: the failback stops them first; a hanging transaction
on the original (no marker will end it) is named and does not hold the rebuild; the planned failover
back moves the connectors from the DR Connect cluster, where they continue exactly (no line written
again, every record written on the original since once in the sink's file)."""
from __future__ import annotations

import re
import threading
import time
import types
import uuid

import pytest
from confluent_kafka import Producer
from kmigrate.config import ClusterConfig
from kmigrate.errors import ConfigError, KmigrateError, WrongCluster
from kmigrate.kafka import txn_wire
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.connect import ConnectClient
from kmigrate.manifest import Manifest
from kmigrate.renames import Renames
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror.driver import Mirror
from kmigrate.run.mirror.spec import MirrorSpec, write_spec
from kmigrate.run.mirror.term import request_stop
from kmigrate.run.mirror.connectors import CONNECTORS, ConnectorWatch
from kmigrate.run.checks.request import RunRequest
from kmigrate.run.mirror.failback import prepare_failback, with_failback_names
from kmigrate.run.mirror.promote import PROMOTED, lost_records, unplanned_failover

from tests.support.airflow import run_dag, task_states
from tests.support.connect import FILE_SINK, delete_connectors, file_source_config, lines_of
from tests.support.kafka import commit_offsets, create_topic, leave_hanging_transaction, produce, records_of
from tests.support.migration import assert_migrated_exactly, partition_watermarks
from tests.support.stack import close_pooled_clients, load_stack_module
from tests.support.waiting import wait_until


@pytest.fixture
def lone_source(tmp_path):
    """A one-broker KRaft source on its own ports with a Connect worker (started on request), which
    the test kills and starts again (its data kept; the worker stays dead: started again, it would
    resume its connectors against the original); stopped by pid at the end."""
    module = load_stack_module()
    cluster = module.Cluster("lonesource", 19792, 19793, 18793)
    service = module.Service(module.broker_name(cluster, 1), "kafka", cluster, tmp_path / "lonesource")
    worker = module.Service("lonesource-connect", "connect", cluster, tmp_path / "lonesource")
    java, launched = module.check_java(), []

    def start(one=service) -> None:
        process = module.launch(java, one)
        launched.append((one, process))
        module.wait_until_answering([one], {one.name: process}, 120)

    def start_connect() -> ConnectClient:
        start(worker)
        return ConnectClient(f"http://localhost:{cluster.connect_port}")

    def kill() -> None:
        for _, process in launched:
            if process.poll() is None:
                process.kill()
                process.wait(30)

    start()
    try:
        yield types.SimpleNamespace(config=ClusterConfig.from_bootstrap("source", cluster.bootstrap), start=start,
                                    start_connect=start_connect, kill=kill)
    finally:
        close_pooled_clients()
        for one, process in launched:
            if process.poll() is None:
                module.stop(one, pid=process.pid)


def feed_lines(stopping: threading.Event, path) -> None:
    """A line appended to `path` every 5 ms (the external system of a file source connector), numbered on."""
    i = len(path.read_text().splitlines()) if path.exists() else 0
    with open(path, "a") as out:
        while not stopping.wait(0.005):
            out.write(f"line {i}\n")
            out.flush()
            i += 1


def values(cluster: ClusterConfig, topic: str, partitions: int) -> list[str]:
    return [v.decode() for p in range(partitions) for _, _, v, _, _ in records_of(cluster, topic, p)]


def write_until(stopping: threading.Event, source: ClusterConfig, tx: str, plain: str) -> None:
    """Transactions of 10 records over the two partitions of `tx`, and single records to `plain`,
    until `stopping` is set or the source dies."""
    # the transaction open at the kill is aborted by the source's coordinator 10 s after the source is back
    producer = Producer(source.producer(**{"transactional.id": f"uf-{uuid.uuid4().hex[:6]}", "linger.ms": 2,
                                           "transaction.timeout.ms": 10000}))
    plain_producer = Producer(source.producer(**{"enable.idempotence": True, "linger.ms": 2}))
    try:
        producer.init_transactions(30)
        i = 0
        while not stopping.is_set():
            producer.begin_transaction()
            for j in range(10):
                producer.produce(tx, b"t%d" % (i + j), key=b"k%d" % j, partition=j % 2)
            producer.commit_transaction(10)
            plain_producer.produce(plain, b"p%d" % i, partition=(i // 10) % 2)
            plain_producer.poll(0)
            i += 10
            stopping.wait(0.01)  # a pace the in-process mirror keeps up with
    except Exception:  # noqa: BLE001 - the source was killed under it
        pass
    finally:  # nothing left queued to reach the source once it is started again
        for p in (producer, plain_producer):
            p.purge()
            p.flush(0)


def caught_up(dr: ClusterConfig, original: ClusterConfig, topics: dict[str, int]) -> bool:
    """The original holds what the DR cluster does (False while a rebuilt topic is not there yet)."""
    try:
        return partition_watermarks(original, topics) == partition_watermarks(dr, topics)
    except KmigrateError:
        return False


def test_an_unplanned_failover_then_a_failback_that_rebuilds_what_diverged_only_when_asked(
        stack, dagbag, lone_source, tmp_path, request):
    source, target = lone_source.config, stack.target
    prefix = f"uf{uuid.uuid4().hex[:6]}"
    tx, plain, group = f"{prefix}.tx", f"{prefix}.plain", f"{prefix}.readers"
    fromfile, feed, sunk = f"{prefix}.fromfile", tmp_path / "feed.txt", tmp_path / "sunk.txt"
    for topic, partitions in ((tx, 2), (plain, 2), (fromfile, 1)):
        create_topic(source, topic, partitions)
    # a source connector (a file's lines into `fromfile`) and a sink connector (`plain` into a file)
    source_connect, connectors = lone_source.start_connect(), (f"{prefix}-lines", f"{prefix}-sink")
    source_connect.create(connectors[0], file_source_config(feed, fromfile))
    source_connect.create(connectors[1], {"connector.class": FILE_SINK, "tasks.max": "1", "file": str(sunk),
                                          "topics": plain})
    manifest = Manifest(str(tmp_path / "state"), "unplanned")
    spec = write_spec(manifest, MirrorSpec(re.escape(prefix) + r"\..*", groups=re.escape(group), interval_s=0.2,
                                           term_s=5, verify_every_s=2, connectors=connectors))
    watch = ConnectorWatch(manifest, source, target, source_connect, list(connectors), every_s=1)
    mirror = Mirror(manifest, source, target, spec, connectors=watch,  # its terms followed here
                    say=lambda line: print("mirror:", line))
    stopping, feeding = threading.Event(), threading.Event()
    writer = threading.Thread(target=write_until, args=(stopping, source, tx, plain), daemon=True)
    feeder = threading.Thread(target=feed_lines, args=(feeding, feed), daemon=True)
    runner = threading.Thread(target=mirror.run, daemon=True)
    writer.start()
    feeder.start()
    runner.start()
    dr_connect = ConnectClient("http://localhost:28083")  # the DR cluster's (the stack target's) worker
    request.addfinalizer(lambda: (feeding.set(), feeder.join(30), delete_connectors([dr_connect], connectors)))
    try:
        wait_until(lambda: (s := mirror_status.read(manifest)) and s["round"] >= 3
                   and all(p["dr_end"] > 20 for p in s["partitions"]), "the mirror under way", 120)
        commit_offsets(source, group, {(tx, 0): 7, (tx, 1): 5})
        wait_until(lambda: any(g.get("group") == group for g in mirror_status.read(manifest)["groups"]),
                   "the group mirrored", 60)
        wait_until(lambda: (kept := manifest.read(CONNECTORS)) and all(kept["connectors"][n]["offsets"] for n in connectors),
                   "the connectors' offsets kept", 60)
        with pytest.raises(ConfigError, match="answers: an unplanned failover"):  # the source is up: refused
            unplanned_failover(manifest, source, target)
        # a transaction open at the kill on plain[0]: its records are on the source and never copied (the
        # mirror copies up to the last stable offset); back, the source's coordinator aborts it after its
        # timeout, and the offsets it took are what the failover lost there (a burst of records right
        # before the kill was once enough, until the mirror kept up with it)
        open_txn = Producer(source.producer(**{"transactional.id": f"{prefix}-open", "transaction.timeout.ms": 5000}))
        open_txn.init_transactions(30)
        open_txn.begin_transaction()
        for i in range(100):
            open_txn.produce(plain, b"open at the kill %d" % i, partition=0)
        open_txn.flush(30)
        lone_source.kill()  # SIGKILL of the broker and the Connect worker, while everything writes and copies
        open_txn.purge()
        triggered = time.monotonic()
        run = run_dag(dagbag, "kafka_dr_failover", run_name="unplanned", state_location=str(tmp_path / "state"),
                      unplanned=True, source_kafka_conn_id="lone_kafka_source", stale_after_s=30)
        rto = time.monotonic() - triggered
        runner.join(60)
        assert not runner.is_alive() and mirror_status.read(manifest)["stopped"]
    finally:
        stopping.set()
        request_stop(manifest, "the test is done")
        runner.join(120)
    assert str(run.state) == "success", task_states(run)
    promoted = manifest.read(PROMOTED)
    assert unplanned_failover(manifest, source, target) == promoted  # again (a retry): done already
    dr_ends = {(r["topic"], r["partition"]): r["dr_end"] for r in promoted["partitions"]}
    report = (tmp_path / "state" / "unplanned" / "report.md").read_text()
    assert "## Unplanned failover" in report and f"{tx}[0] | {dr_ends[(tx, 0)]}" in report
    topics = {tx: 2, plain: 2, fromfile: 1}
    keys = [(t, p) for t, n in topics.items() for p in range(n)]
    # the connectors run on the DR Connect cluster, from the mirror's last safe reading
    assert {row["name"]: row["state"] for row in promoted["connectors"]["states"]} == dict.fromkeys(connectors, "RUNNING")
    apps = [k for k in keys if k[0] != fromfile]  # (the source connector writes `fromfile` on the DR cluster now)
    with ClusterAdmin(target) as admin:
        assert admin.stable_ends(apps, retry=True) == admin.end_offsets(apps, retry=True) == {k: dr_ends[k] for k in apps}
        assert admin.stable_ends([(fromfile, 0)], retry=True)[(fromfile, 0)] >= dr_ends[(fromfile, 0)]  # none left open
        committed = {k: c.offset for k, c in admin.committed(group).items()}
    assert committed == {(tx, 0): min(7, dr_ends[(tx, 0)]), (tx, 1): min(5, dr_ends[(tx, 1)])}
    [row] = promoted["groups"]
    assert row["group"] == group and row["past_dr_end"] == 0

    writer.join(90)
    assert not writer.is_alive()  # its producers gave up: nothing of theirs reaches the source once it is back
    lone_source.start()  # the source back: what the failover lost, named; the rest equal offset for offset
    lost = wait_until(lambda: (rows := {(r["topic"], r["partition"]): r for r in lost_records(manifest, source)})
                      and rows[(plain, 0)]["offsets"] > 0 and rows, "the open transaction aborted on the source", 90,
                      ignore=(KmigrateError,))
    for key in keys:
        assert lost[key]["from"] == dr_ends[key] and lost[key]["offsets"] == lost[key]["to"] - dr_ends[key] >= 0
        assert records_of(target, *key, end=dr_ends[key]) == records_of(source, *key, end=dr_ends[key])
    assert lost[(plain, 0)]["offsets"] > 0

    # the applications and the connectors go on on the DR cluster: the source connector skips no line
    # of its file (it writes again, at most, the lines after the reading: Connect's at-least-once), and
    # the sink connector writes every record the DR cluster holds, those written there since included
    produce(target, plain, [(b"k", b"written on the DR cluster %d" % i) for i in range(40)], 1)
    feeding.set()  # it fed lines since the failover too
    feeder.join(30)
    fed = feed.read_text().splitlines()
    wait_until(lambda: list(dict.fromkeys(values(target, fromfile, 1))) == fed, "every line on the DR cluster", 60)
    wait_until(lambda: set(values(target, plain, 2)) <= set(lines_of(sunk)), "every DR record in the sink's file", 60)
    repeated = len(values(target, fromfile, 1)) - len(fed)

    # failback: the applications wrote on the DR cluster since; the original is brought back as primary. Its
    # Connect worker, started again, resumes its stale copies of the connectors: the failback stops them first
    commit_offsets(target, group, {(plain, 1): dr_ends[(plain, 1)] + 25})  # a consumer on the DR cluster, part way
    original_connect = lone_source.start_connect()
    back = Manifest(str(tmp_path / "state"), "back")
    # a hanging transaction on the original (one a broker killed in a commit's markers leaves): no marker
    # will come for it, so it does not hold the rebuild's deletion of its topic, and the failback names it
    hanging_at = leave_hanging_transaction(source, tx, 1, f"{prefix}-hanging")
    named = txn_wire.describe_open(source, tx, 1, hanging_at)  # as the quiesce's, snapshot's and copy's errors say
    assert named.startswith(f"a hanging transaction open since offset {hanging_at} ") and "abort --topic" in named
    back_spec = write_spec(back, MirrorSpec(re.escape(prefix) + r"\..*", groups=re.escape(group), interval_s=0.2,
                                            term_s=5, verify_every_s=2))
    # the connections as the mirror had them (not swapped): refused by the clusters' ids, nothing stopped
    with pytest.raises(WrongCluster, match="swap the source and target connections"):
        prepare_failback(manifest, back, source, target, rebuild=True, original_connect=dr_connect)
    assert [dr_connect.state(name) for name in connectors] == ["RUNNING", "RUNNING"]  # the applications' go on
    with ClusterAdmin(target) as admin:
        assert {tx, plain} <= set(admin.list_topics())
    with pytest.raises(ConfigError, match=rf"{re.escape(plain)}\[0\] offsets {dr_ends[(plain, 0)]}-"):
        prepare_failback(manifest, back, target, source, rebuild=False, original_connect=original_connect)  # diverged
    assert all(original_connect.state(name) == "STOPPED" for name in connectors)
    said: list[str] = []
    discarded = prepare_failback(manifest, back, target, source, rebuild=True, original_connect=original_connect,
                                 say=said.append)
    # named by the first open transaction of the partition: the brokers' kill -9 above can leave one
    # of the live producer's hanging before it (a commit whose markers never came)
    opens = [int(m.group(1)) for m in (re.match(rf"{re.escape(tx)}\[1\] on the original holds a hanging transaction "
                                                r"open since offset (\d+) ", line) for line in said) if m]
    assert opens and opens[0] <= hanging_at, said
    assert {r["topic"] for r in discarded["partitions"]} <= set(discarded["topics"]) and plain in discarded["topics"]
    back_mirror = Mirror(back, target, source, back_spec, say=lambda _: None)  # from the DR cluster to the original
    runner = threading.Thread(target=back_mirror.run, daemon=True)
    runner.start()
    try:
        wait_until(lambda: caught_up(target, source, topics), "the original caught up with the DR cluster", 120)
        run = run_dag(dagbag, "kafka_dr_failover", run_name="back", state_location=str(tmp_path / "state"),
                      source_kafka_conn_id="kafka_target", target_kafka_conn_id="lone_kafka_source",
                      connectors=list(connectors), source_connect_conn_id="connect_target",
                      target_connect_conn_id="lone_connect", quiesce_seconds=1, stale_after_s=30)
        runner.join(60)
    finally:
        request_stop(back, "the test is done")
        runner.join(120)
    assert str(run.state) == "success", task_states(run)
    # every record of the DR cluster on the original at its offset, the groups' offsets as on the DR cluster
    # (a consumer continues on the original at its next record: nothing read twice, nothing skipped)
    assert_migrated_exactly(target, source, topics, [group], partition_watermarks(target, topics))
    # the connectors continue on the original exactly where they stopped on the DR cluster
    assert [original_connect.state(name) for name in connectors] == ["RUNNING", "RUNNING"]
    feeding = threading.Event()
    feeder = threading.Thread(target=feed_lines, args=(feeding, feed), daemon=True)
    feeder.start()
    produce(source, plain, [(b"k", b"after the failback %d" % i) for i in range(30)], 0)
    wait_until(lambda: len(feed.read_text().splitlines()) > len(fed) + 100, "lines fed after the failback", 30)
    feeding.set()
    feeder.join(30)
    fed = feed.read_text().splitlines()
    wait_until(lambda: list(dict.fromkeys(values(source, fromfile, 1))) == fed, "every line on the original", 60)
    assert len(values(source, fromfile, 1)) - len(fed) == repeated  # none written again by the failback
    wait_until(lambda: all(lines_of(sunk).count(f"after the failback {i}") == 1 for i in range(30)),
               "the records written on the original since the failback once each in the sink's file", 60)
    print(f"unplanned failover: {rto:.1f}s trigger to promoted through the DAG, {sum(dr_ends.values())} offsets promoted, lost "
          f"{sum(r['offsets'] for r in lost.values())}, {len(promoted['aborted'])} transactions aborted, "
          f"{promoted['behind_records']} behind at the mirror's last status, {repeated} lines written again by the "
          "source connector")


def test_an_unplanned_failover_of_a_renamed_mirror_and_its_failback_keep_each_clusters_names(
        stack, dagbag, lone_source, tmp_path, request):
    """A mirror that renames (a DR cluster that is a consolidation target) failed over unplanned: the DR
    ends, the group and the sink connector promoted under the DR names, the DR cluster's topic and group
    of the source's own names (another team's) untouched. Then the failback (its request's names the
    mirror's reversed, its mirror back and the planned failover of that through kafka_dr_failover): what
    was written on the DR cluster since is on the original under the original's names, the group and the
    sink connector continue there under theirs, and the DR cluster's names are not created there."""
    source, target = lone_source.config, stack.target
    prefix = f"ufr{uuid.uuid4().hex[:6]}"
    tx, group, sink, sunk = f"{prefix}.tx", f"{prefix}.readers", f"{prefix}-sink", tmp_path / "sunk.txt"
    renames = Renames(topic_prefix="dr.", group_prefix="dr-")
    create_topic(source, tx, 2)
    create_topic(target, tx, 1)  # another team's, under the source's name
    produce(target, tx, [(b"theirs", b"x")])
    theirs = records_of(target, tx, 0)
    commit_offsets(target, group, {(tx, 0): 1})
    source_connect = lone_source.start_connect()
    source_connect.create(sink, {"connector.class": FILE_SINK, "tasks.max": "1", "file": str(sunk), "topics": tx})
    manifest = Manifest(str(tmp_path / "state"), "unplanned-renamed")
    spec = write_spec(manifest, MirrorSpec(re.escape(prefix) + r"\..*", groups=re.escape(group), interval_s=0.2,
                                           term_s=5, verify_every_s=2, connectors=(sink,), renames=renames))
    watch = ConnectorWatch(manifest, source, target, source_connect, [sink], every_s=1)
    mirror = Mirror(manifest, source, target, spec, connectors=watch, say=lambda line: print("mirror:", line))
    runner = threading.Thread(target=mirror.run, daemon=True)
    dr_connect = ConnectClient("http://localhost:28083")
    request.addfinalizer(lambda: delete_connectors([dr_connect], [sink]))
    for p in (0, 1):
        produce(source, tx, [(b"k", b"r%d.%d" % (p, i)) for i in range(30)], p)
    runner.start()
    try:
        wait_until(lambda: (s := mirror_status.read(manifest)) and all(p["dr_end"] == 30 for p in s["partitions"]),
                   "the mirror caught up", 120)
        commit_offsets(source, group, {(tx, 0): 7, (tx, 1): 5})
        wait_until(lambda: any(g.get("dr_group") == f"dr-{group}" for g in mirror_status.read(manifest)["groups"]),
                   "the group mirrored", 60)
        wait_until(lambda: (kept := manifest.read(CONNECTORS)) and kept["connectors"][sink]["offsets"],
                   "the sink's offsets kept", 60)
        lone_source.kill()
        promoted = unplanned_failover(manifest, source, target, stale_after_s=30, dr_connect=dr_connect)
        runner.join(60)
        assert not runner.is_alive()
    finally:
        request_stop(manifest, "the test is done")
        runner.join(120)
    assert {(r["topic"], r["partition"], r.get("dr_topic"), r["dr_end"]) for r in promoted["partitions"]} == {
        (tx, 0, f"dr.{tx}", 30), (tx, 1, f"dr.{tx}", 30)}
    [row] = promoted["groups"]
    assert (row["group"], row["dr_group"], row["past_dr_end"], row["offsets"]) == (
        group, f"dr-{group}", 0, {f"dr.{tx}[0]": 7, f"dr.{tx}[1]": 5})
    assert dr_connect.config(sink)["topics"] == f"dr.{tx}"  # the sink reads the DR names
    wait_until(lambda: len(lines_of(sunk)) >= 60, "the sink's file holds every record", 60)
    with ClusterAdmin(target) as admin:  # the source's names on the DR cluster: another team's, as they were
        assert {k: c.offset for k, c in admin.committed(group).items()} == {(tx, 0): 1}
        assert admin.partition_count(tx) == 1
    assert records_of(target, tx, 0) == theirs
    for p in (0, 1):
        assert [r[1:3] for r in records_of(target, f"dr.{tx}", p)] == [(b"k", b"r%d.%d" % (p, i)) for i in range(30)]

    # the applications go on on the DR cluster under its names; then the failback
    produce(target, f"dr.{tx}", [(b"k", b"on the DR cluster %d" % i) for i in range(20)], 1)
    commit_offsets(target, f"dr-{group}", {(f"dr.{tx}", 0): 12, (f"dr.{tx}", 1): 40})
    lone_source.start()
    original_connect = lone_source.start_connect()  # it resumes its stale sink: the failback stops it first
    params = {"state_location": str(tmp_path / "state"), "failback_of": "unplanned-renamed",
              "topics_include": re.escape(f"dr.{prefix}") + r"\..*", "groups": re.escape(f"dr-{group}")}
    request_back = with_failback_names(RunRequest.from_params(params, "back-renamed"))
    assert request_back.renames == Renames(topics={f"dr.{tx}": tx}, groups={f"dr-{group}": group})
    back = Manifest(str(tmp_path / "state"), "back-renamed")
    back_spec = write_spec(back, MirrorSpec(request_back.topics_include, groups=request_back.groups, interval_s=0.2,
                                            term_s=5, verify_every_s=2, renames=request_back.renames))
    assert prepare_failback(manifest, back, target, source, rebuild=False,
                            original_connect=original_connect)["topics"] == []  # nothing diverged: the source had nothing the failover lost
    assert original_connect.state(sink) == "STOPPED"
    back_mirror = Mirror(back, target, source, back_spec, say=lambda line: print("back:", line))
    back_runner = threading.Thread(target=back_mirror.run, daemon=True)
    back_runner.start()
    try:
        wait_until(lambda: all_ends(source, tx) == all_ends(target, f"dr.{tx}"), "the original caught up", 120,
                   ignore=(KmigrateError,))
        run = run_dag(dagbag, "kafka_dr_failover", run_name="back-renamed", state_location=str(tmp_path / "state"),
                      source_kafka_conn_id="kafka_target", target_kafka_conn_id="lone_kafka_source",
                      connectors=[sink], source_connect_conn_id="connect_target", target_connect_conn_id="lone_connect",
                      quiesce_seconds=1, stale_after_s=30)
        back_runner.join(60)
    finally:
        request_stop(back, "the test is done")
        back_runner.join(120)
    assert str(run.state) == "success", task_states(run)
    for p in (0, 1):
        assert records_of(source, tx, p) == records_of(target, f"dr.{tx}", p)
    with ClusterAdmin(source) as admin:
        assert {k: c.offset for k, c in admin.committed(group).items()} == {(tx, 0): 12, (tx, 1): 40}
        assert f"dr.{tx}" not in admin.list_topics() and not admin.committed(f"dr-{group}")
    assert original_connect.config(sink)["topics"] == tx and original_connect.state(sink) == "RUNNING"
    wait_until(lambda: all(lines_of(sunk).count(f"on the DR cluster {i}") >= 1 for i in range(20)),
               "the records written on the DR cluster in the sink's file", 60)
    assert records_of(target, tx, 0) == theirs  # the other team's, on the DR cluster, as it was


def all_ends(cluster: ClusterConfig, topic: str) -> list[int]:
    with ClusterAdmin(cluster) as admin:
        return [e for _, e in sorted(admin.end_offsets([(topic, 0), (topic, 1)], retry=True).items())]
