"""Snapshot, consumer-group replication and connector migration against the real stack (docs/DESIGN.md §3,
5, 6): consumers and connectors continue on the target exactly where they stopped on the source."""
from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from kmigrate.config import ClusterConfig
from kmigrate.errors import ConfigError, ConnectorNotFound, ConnectUnreachable, GroupActive, GroupError
from kmigrate.kafka import group_wire
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.connect import ConnectClient
from kmigrate.manifest import Manifest
from kmigrate.model import TRANSLATE
from kmigrate.run.connectors.migrate import migrate_connectors, resume_connectors, rollback_connectors, stop_connectors
from kmigrate.run.cutover.groups import replicate_groups
from kmigrate.run.copying.plan import read_plan
from kmigrate.run.cutover.snapshot import take_snapshot
from kmigrate.run.targets.prepare import prepare_target_topic

from tests.support.connect import FILE_SINK, FILE_SOURCE, copy_run, lines_of
from tests.support.kafka import create_topic, produce, read_partition, watermarks
from tests.support.migration import assert_exactly, consume_group, expected_after
from tests.support.waiting import wait_until


def commit(cluster, group: str, topic: str, positions: dict[int, int]) -> None:
    consumer = Consumer(cluster.consumer(group))
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in positions.items()], asynchronous=False)
    finally:
        consumer.close()


def seed_keyed(cluster, topic: str, partitions: int, per_partition: int) -> None:
    create_topic(cluster, topic, partitions)
    for p in range(partitions):
        produce(cluster, topic, [(f"{p}-{i}".encode(), f"value {p}-{i}".encode()) for i in range(per_partition)], p)


@pytest.mark.parametrize("mode", ["preserve", "translate"])
def test_groups_resume_on_the_target_exactly_where_they_stopped(stack, unique_name, tmp_path, mode):
    topic = unique_name
    seed_keyed(stack.source, topic, partitions=2, per_partition=200)
    positions = {f"{unique_name}-a": {0: 30, 1: 170}, f"{unique_name}-b": {0: 200, 1: 0}}
    for group, at in positions.items():
        commit(stack.source, group, topic, at)
    if mode == TRANSLATE:  # the target already holds an unrelated prefix, so offsets differ
        with ClusterAdmin(stack.source) as source, ClusterAdmin(stack.target) as target:
            prepare_target_topic(source, target, topic)
        produce(stack.target, topic, [(b"old", b"unrelated %d" % i) for i in range(37)], 0)
        produce(stack.target, topic, [(b"old", b"unrelated %d" % i) for i in range(5)], 1)

    manifest = Manifest(str(tmp_path / "state"), "run-1")
    snapshot = take_snapshot(manifest, stack.source, topics_include=topic, groups=f"{unique_name}-.*",
                             modes={topic: mode})
    assert sorted(snapshot["groups"]) == sorted(positions)
    assert snapshot["groups"][f"{unique_name}-a"]["offsets"] == [
        {"topic": topic, "partition": 0, "offset": 30, "metadata": ""},
        {"topic": topic, "partition": 1, "offset": 170, "metadata": ""}]
    copy_run(stack, manifest)

    results = replicate_groups(manifest, stack.target)
    shift = {0: 37, 1: 5} if mode == TRANSLATE else {0: 0, 1: 0}
    for result in results:
        at = positions[result["group"]]
        assert [(o["partition"], o["target_offset"]) for o in result["offsets"]] == \
            [(p, at[p] + shift[p]) for p in (0, 1)]
    for _ in range(2):  # re-runs: the same offsets, nothing written
        again = replicate_groups(manifest, stack.target)
        assert [r["offsets"] for r in again] == [r["offsets"] for r in results]
        assert all(r["written"] == 0 for r in again)

    for group, at in positions.items():
        assert_exactly(consume_group(stack.target, group, topic, 2), expected_after(stack, topic, at))


def test_snapshot_is_taken_once_and_never_overwritten(stack, unique_name, tmp_path):
    seed_keyed(stack.source, unique_name, partitions=1, per_partition=10)
    manifest = Manifest(str(tmp_path / "state"), "run-1")
    first = take_snapshot(manifest, stack.source, topics_include=unique_name)
    produce(stack.source, unique_name, [(b"k", b"after the snapshot")])
    for _ in range(2):
        assert take_snapshot(manifest, stack.source, topics_include=unique_name) == first
    assert first["topics"][unique_name]["partitions"] == [{"partition": 0, "log_start": 0, "end": 10}]
    assert read_plan(manifest)["units"][0]["end_offset"] == 10


def test_a_group_active_on_the_target_is_refused_and_nothing_is_written(stack, unique_name, tmp_path):
    topic = unique_name
    seed_keyed(stack.source, topic, partitions=1, per_partition=20)
    for group in ("a", "b"):
        commit(stack.source, f"{unique_name}-{group}", topic, {0: 5})
    manifest = Manifest(str(tmp_path / "state"), "run-1")
    take_snapshot(manifest, stack.source, topics_include=topic, groups=f"{unique_name}-.*")
    copy_run(stack, manifest)
    active = Consumer(stack.target.consumer(f"{unique_name}-b"))
    active.subscribe([topic])
    try:
        wait_until(lambda: active.poll(0.2) is not None or active.assignment(), "the consumer to join")
        with pytest.raises(GroupActive, match=f"consumer group '{unique_name}-b' has members on the target"):
            replicate_groups(manifest, stack.target)
    finally:
        active.close()
    with ClusterAdmin(stack.target) as admin:
        assert admin.committed_offsets(f"{unique_name}-a") == {}  # checked before anything was written


def test_offsets_for_a_partition_the_target_lacks_are_refused(stack, unique_name, tmp_path):
    topic = unique_name
    seed_keyed(stack.source, topic, partitions=2, per_partition=10)
    commit(stack.source, f"{unique_name}-g", topic, {0: 3, 1: 4})
    create_topic(stack.target, topic, 1)  # a target topic with too few partitions
    manifest = Manifest(str(tmp_path / "state"), "run-1")
    take_snapshot(manifest, stack.source, topics_include=topic, groups=f"{unique_name}-.*")
    with pytest.raises(GroupError, match=rf"{topic}\[1\], which the target cluster .* does not have"):
        replicate_groups(manifest, stack.target)
    with ClusterAdmin(stack.target) as admin:
        assert admin.committed_offsets(f"{unique_name}-g") == {}


def test_bad_selections_write_nothing(stack, unique_name, tmp_path):
    seed_keyed(stack.source, unique_name, partitions=1, per_partition=1)
    manifest = Manifest(str(tmp_path / "state"), "run-1")
    with pytest.raises(ConfigError, match="not a valid regular expression"):
        take_snapshot(manifest, stack.source, topics_include="orders(")
    with pytest.raises(ConnectorNotFound, match=f"{unique_name}-missing"):
        take_snapshot(manifest, stack.source, topics_include=unique_name, source_connect=stack.source_connect,
                      connectors=[f"{unique_name}-missing"])
    with pytest.raises(ConnectUnreachable, match="127.0.0.1:9"):
        take_snapshot(manifest, stack.source, topics_include=unique_name,
                      source_connect=ConnectClient("http://127.0.0.1:9", request_timeout_s=2), connectors=["any"])
    assert manifest.parts() == []


def append(path: Path, lines: list[str]) -> None:
    with path.open("a") as handle:
        handle.write("".join(line + "\n" for line in lines))


def file_source_at(stack, connectors: list, name: str, topic: str, data: Path, lines: list[str]) -> None:
    """A file source connector `name` on the source Connect cluster, reading `data` (its first `lines`
    written) into `topic`, once all of them are on the source; the test's connectors fixture deletes it
    on both Connect clusters afterwards."""
    append(data, lines)
    create_topic(stack.source, topic)
    stack.source_connect.create(name, {"connector.class": FILE_SOURCE, "tasks.max": "1", "file": str(data),
                                       "topic": topic})
    connectors.append((stack.source_connect, name))
    connectors.append((stack.target_connect, name))
    wait_until(lambda: watermarks(stack.source, topic)[1] == len(lines), f"the first {len(lines)} lines on the source")


def test_file_source_connector_continues_on_the_target(stack, unique_name, tmp_path, connectors):
    topic, name = unique_name, f"{unique_name}-src"
    data = tmp_path / "input.txt"
    lines = [f"line {i:03d}" for i in range(150)]
    file_source_at(stack, connectors, name, topic, data, lines[:100])
    for _ in range(2):  # stopping twice is stopping once
        stop_connectors(stack.source_connect, [name])
    append(data, lines[100:130])  # written while the connector is stopped

    manifest = Manifest(str(tmp_path / "state"), "run-1")
    snapshot = take_snapshot(manifest, stack.source, topics_include=topic, source_connect=stack.source_connect,
                             connectors=[name])
    assert snapshot["connectors"][name]["type"] == "source" and snapshot["connectors"][name]["state"] == "STOPPED"
    copy_run(stack, manifest)
    for _ in range(2):  # re-run: the same connector, the same offsets
        [result] = migrate_connectors(manifest, stack.target_connect)
        assert result["state"] == "STOPPED" and result["offsets"] == snapshot["connectors"][name]["offsets"]
    resume_connectors(stack.target_connect, [name])
    append(data, lines[130:])  # written while it runs on the target

    wait_until(lambda: watermarks(stack.target, topic)[1] == 150, "every line on the target")
    assert [v.decode() for _, _, v in read_partition(stack.target, topic)] == lines
    assert watermarks(stack.source, topic) == (0, 100)  # the source cluster was not written to
    assert stack.source_connect.state(name) == "STOPPED"
    [again] = migrate_connectors(manifest, stack.target_connect)  # after resume: left alone
    assert again["state"] == "RUNNING" and not again["offsets_written"]


def test_file_sink_connector_continues_on_the_target(stack, unique_name, tmp_path, connectors):
    topic, name = unique_name, f"{unique_name}-sink"
    out_source, out_target = tmp_path / "sink-source.txt", tmp_path / "sink-target.txt"
    values = [f"record {i:03d}" for i in range(150)]
    create_topic(stack.source, topic)
    produce(stack.source, topic, [(None, v.encode()) for v in values[:100]])
    stack.source_connect.create(name, {"connector.class": FILE_SINK, "tasks.max": "1", "file": str(out_source),
                                       "topics": topic})
    connectors.append((stack.source_connect, name))
    connectors.append((stack.target_connect, name))
    wait_until(lambda: len(lines_of(out_source)) == 100, "the sink to write 100 records")
    wait_until(lambda: stack.source_connect.offsets(name) == [
        {"partition": {"kafka_topic": topic, "kafka_partition": 0}, "offset": {"kafka_offset": 100}}],
        "the sink's committed offset 100")
    stop_connectors(stack.source_connect, [name])
    produce(stack.source, topic, [(None, v.encode()) for v in values[100:]])  # arrives while it is stopped

    manifest = Manifest(str(tmp_path / "state"), "run-1")
    take_snapshot(manifest, stack.source, topics_include=topic, source_connect=stack.source_connect, connectors=[name])
    copy_run(stack, manifest)
    migrate_connectors(manifest, stack.target_connect, overrides={name: {"file": str(out_target)}})
    resume_connectors(stack.target_connect, [name])

    wait_until(lambda: len(lines_of(out_target)) == 50, "the target's sink to write the 50 records after offset 100")
    assert lines_of(out_source) + lines_of(out_target) == values  # every record exactly once, in order
    assert lines_of(out_source) == values[:100]


def test_rollback_resumes_the_source_and_stops_the_target(stack, unique_name, tmp_path, connectors):
    topic, name = unique_name, f"{unique_name}-src"
    data = tmp_path / "input.txt"
    file_source_at(stack, connectors, name, topic, data, [f"line {i}" for i in range(10)])
    stop_connectors(stack.source_connect, [name])
    manifest = Manifest(str(tmp_path / "state"), "run-1")
    take_snapshot(manifest, stack.source, topics_include=topic, source_connect=stack.source_connect, connectors=[name])
    copy_run(stack, manifest)
    migrate_connectors(manifest, stack.target_connect)
    resume_connectors(stack.target_connect, [name])

    for _ in range(2):  # idempotent
        rollback_connectors(stack.source_connect, stack.target_connect, {name: "RUNNING"})
    assert stack.target_connect.state(name) == "STOPPED" and stack.source_connect.state(name) == "RUNNING"
    append(data, ["after the rollback"])
    wait_until(lambda: watermarks(stack.source, topic)[1] == 11, "the source connector to run again")


def test_a_groups_offsets_are_read_and_written_through_any_bootstrap_server_that_answers(stack, unique_name):
    """The first bootstrap server gone (nothing listens there) is not waited for: the next one is asked."""
    with socket.socket() as sock:  # a port bound and closed: refused
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    source = ClusterConfig(stack.source.name, {**stack.source.settings,
                                                "bootstrap.servers": f"127.0.0.1:{closed},{stack.source.bootstrap_servers}"})
    topic, group = unique_name, f"{unique_name}-group"
    seed_keyed(stack.source, topic, 1, 5)
    began = time.monotonic()
    group_wire.commit(source, group, {(topic, 0): (3, "meta")}, timeout_s=5.0)
    assert group_wire.committed(source, group, timeout_s=5.0) == {(topic, 0): (3, "meta")}
    assert time.monotonic() - began < 3.0
