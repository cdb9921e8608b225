"""Target topics on the real clusters: the copy's settings are put back to the source's, what the
source changed after the target topic was made is applied only to a topic the run created, and
topics with more partitions (records) than the KRaft controller writes for one request are created
in batches, a batch it refuses for its size halved."""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from kmigrate.errors import ClusterUnavailable, TopicMismatch
from kmigrate.kafka.admin import MAX_RECORDS_PER_REQUEST, ClusterAdmin, shows_change
from kmigrate.kafka.topic_batches import create_topics, too_large, topic_records
from kmigrate.manifest import Manifest, Part
from kmigrate.model import WorkUnit
from kmigrate.run.targets import prepare
from kmigrate.run.targets.prepare import (
    COPY_SETTINGS,
    created_topics,
    prepare_target_topic,
    prepare_targets,
    reconcile_target_topic,
    restore_target_topic,
)
from kmigrate.run.targets.topic_io import create_all, wait_for_leaders

from tests.support.kafka import create_topic
from tests.support.waiting import wait_until


def test_the_copy_settings_are_restored_to_the_source_values_and_a_second_restore_changes_nothing(stack, unique_name):
    create_topic(stack.source, unique_name, config={"message.timestamp.type": "LogAppendTime",
                                                    "message.timestamp.before.max.ms": "86400000"})
    with ClusterAdmin(stack.source) as source, ClusterAdmin(stack.target) as target:
        assert prepare_target_topic(source, target, unique_name).created
        assert {k: target.topic_configs(unique_name)[k] for k in COPY_SETTINGS} == COPY_SETTINGS
        restored = restore_target_topic(source, target, unique_name)
        assert restored == {"message.timestamp.type": ["CreateTime", "LogAppendTime"],
                            "message.timestamp.before.max.ms": [COPY_SETTINGS["message.timestamp.before.max.ms"],
                                                                "86400000"],
                            "message.timestamp.after.max.ms": [COPY_SETTINGS["message.timestamp.after.max.ms"],
                                                               "3600000"]}  # the source's (a broker default)
        assert restore_target_topic(source, target, unique_name) == {k: [v[1], v[1]] for k, v in restored.items()}
        assert target.topic_configs(unique_name) == source.topic_configs(unique_name)
        # a later copy into the topic sets them again; one with nothing to write leaves them alone
        prepare_target_topic(source, target, unique_name, writes=False)
        assert target.topic_configs(unique_name)["message.timestamp.type"] == "LogAppendTime"
        prepare_target_topic(source, target, unique_name, writes=True)
        assert target.topic_configs(unique_name)["message.timestamp.type"] == "CreateTime"


def test_source_changes_are_applied_to_a_topic_the_run_created_and_refused_on_another(stack, unique_name):
    create_topic(stack.source, unique_name, partitions=2)
    create_topic(stack.target, unique_name, partitions=2)
    with ClusterAdmin(stack.source) as source, ClusterAdmin(stack.target) as target:
        source.add_partitions(unique_name, 3)
        source.alter_topic_configs(unique_name, {"retention.ms": "3600000"})
        # the broker applies a change once the controller's record reaches it: a describe right after may be older
        wait_until(lambda: source.topic_configs(unique_name)["retention.ms"] == "3600000"
                   and source.partition_count(unique_name) == 3, f"{unique_name}: the source's changes", 30)
        with pytest.raises(TopicMismatch, match=rf"'{unique_name}' changed.*partitions 2 -> 3.*did not create"):
            reconcile_target_topic(source, target, unique_name, created_by_run=False)
        assert target.partition_count(unique_name) == 2  # nothing changed
        assert target.topic_configs(unique_name)["retention.ms"] == "604800000"

        changed = reconcile_target_topic(source, target, unique_name, created_by_run=True)
        assert changed == {"partitions": [2, 3], "configs": {"retention.ms": ["604800000", "3600000"]}}
        assert target.partition_count(unique_name) == 3
        assert reconcile_target_topic(source, target, unique_name, created_by_run=False) == {
            "partitions": None, "configs": {}}  # now they agree


def test_topics_created_are_the_runs_even_when_their_leaders_are_not_waited_for(stack, unique_name, tmp_path,
                                                                                monkeypatch):
    create_topic(stack.source, unique_name, partitions=2)

    def no_leaders(target, partitions):  # the wait gives up, as it does past its deadline
        raise ClusterUnavailable(f"target: topics {', '.join(partitions)} have no leader for every partition")

    monkeypatch.setattr(prepare, "wait_for_leaders", no_leaders)
    manifest = Manifest(str(tmp_path), "created-run")
    with pytest.raises(ClusterUnavailable, match="no leader"):
        prepare_targets(stack.source, stack.target, [WorkUnit(unique_name, 0, 0), WorkUnit(unique_name, 1, 0)],
                        manifest=manifest)
    with ClusterAdmin(stack.target) as target:
        assert target.partition_count(unique_name) == 2
    # a retry finds it existing: still the run's, so its source changes are applied, a rollback deletes it
    assert created_topics(manifest) == {unique_name}


def test_the_copy_settings_of_many_topics_are_restored_in_one_request_each_to_its_source_values(
        stack, unique_name, tmp_path, monkeypatch):
    """The window's restore step: every snapshot topic's settings put back at once (one DescribeConfigs a
    cluster, one IncrementalAlterConfigs), each to its own source's values, a renamed one under its
    target name; a second run changes nothing and sends no change."""
    sources = {f"{unique_name}-a": {"message.timestamp.type": "LogAppendTime"},
               f"{unique_name}-b": {"message.timestamp.before.max.ms": "86400000"},
               f"{unique_name}-c": {}}
    names = {f"{unique_name}-c": f"{unique_name}-c-renamed"}
    for topic, config in sources.items():
        create_topic(stack.source, topic, config=config)
        create_topic(stack.target, names.get(topic, topic), config=COPY_SETTINGS)
    manifest = Manifest(str(tmp_path), "restore-run")
    manifest.write_once(Part.SNAPSHOT, {"topics": {topic: {"0": [0, 0]} for topic in sources}})
    sent = []

    class Counting(ClusterAdmin):
        def alter_topics_configs(self, changes, **kwargs):
            sent.append(sorted(t for t, (set_configs, delete) in changes.items() if set_configs or list(delete)))
            return super().alter_topics_configs(changes, **kwargs)

    monkeypatch.setattr(prepare, "ClusterAdmin", Counting)
    restored = prepare.restore_topic_configs(manifest, stack.source, stack.target, names)["topics"]
    assert sent == [sorted(names.get(t, t) for t in sources)]  # one change of them all
    again = prepare.restore_topic_configs(manifest, stack.source, stack.target, names)["topics"]
    assert sent[1:] == [[]]
    assert restored[f"{unique_name}-a"]["message.timestamp.type"] == ["CreateTime", "LogAppendTime"]
    assert restored[f"{unique_name}-b"]["message.timestamp.before.max.ms"][1] == "86400000"
    assert again == {t: {k: [v[1], v[1]] for k, v in r.items()} for t, r in restored.items()}
    with ClusterAdmin(stack.source) as source, ClusterAdmin(stack.target) as target:
        for topic in sources:
            assert target.topic_configs(names.get(topic, topic)) == source.topic_configs(topic), topic


def test_only_the_existing_target_topics_the_copy_writes_to_are_set_for_it(stack, unique_name, tmp_path):
    """prepare_targets asks the ends of every existing target topic's partitions at once: a topic
    whose partitions hold their units' records already is left as it is, one short of them (or of a
    partition) is set for the copy."""
    appended = {"message.timestamp.type": "LogAppendTime"}
    done, short = f"{unique_name}-done", f"{unique_name}-short"
    for topic in (done, short):
        create_topic(stack.source, topic, partitions=2, config=appended)
        create_topic(stack.target, topic, partitions=2, config=appended)
    producer = Producer(stack.target.producer())
    for topic, partition in ((done, 0), (done, 1), (short, 0)):
        for i in range(3):
            producer.produce(topic, value=b"%d" % i, partition=partition)
    assert producer.flush(30) == 0
    units = [WorkUnit(topic, p, 3) for topic in (done, short) for p in range(2)]  # short[1] holds none of its 3
    prepare_targets(stack.source, stack.target, units, manifest=Manifest(str(tmp_path), "written-run"))
    with ClusterAdmin(stack.target) as target:
        assert target.topic_configs(done)["message.timestamp.type"] == "LogAppendTime"
        assert target.topic_configs(short)["message.timestamp.type"] == "CreateTime"


def test_a_change_waited_for_reads_back_its_values_and_the_overrides_it_removed(stack, unique_name):
    create_topic(stack.target, unique_name, config={"retention.ms": "3600000"})
    with ClusterAdmin(stack.target) as target:
        def shows(set_configs, removed):  # what the wait reads back: the topic's own configs
            return shows_change(target.topic_configs(unique_name, explicit_only=True), set_configs, removed)

        assert not shows({}, {"retention.ms"})  # the override is still there
        assert not shows({"segment.ms": "7200000"}, set())
        target.alter_topic_configs(unique_name, {"segment.ms": "7200000"}, delete=["retention.ms"], visible=True)
        assert shows({"segment.ms": "7200000"}, {"retention.ms"})
        own = target.topic_configs(unique_name, explicit_only=True)
        assert own.get("segment.ms") == "7200000" and "retention.ms" not in own


class Requests:
    """An AdminClient that remembers the topics of each CreateTopics it sends."""

    def __init__(self, client) -> None:
        self.client, self.sent = client, []

    def create_topics(self, topics, **kwargs):
        self.sent.append([t.topic for t in topics])
        return self.client.create_topics(topics, **kwargs)

    def __getattr__(self, name):
        return getattr(self.client, name)


def open_files(state_dir: Path) -> tuple[int, int] | None:
    """(open files, their limit) of the local target broker; None when this host does not run it."""
    try:
        pid = (state_dir / "target-kafka" / "pid").read_text().strip()
        limit = next(line for line in Path(f"/proc/{pid}/limits").read_text().splitlines()
                     if line.startswith("Max open files"))
        return len(os.listdir(f"/proc/{pid}/fd")), int(limit.split()[3])
    except (OSError, StopIteration, ValueError):
        return None


@pytest.fixture
def target_admin(stack) -> Iterator[ClusterAdmin]:
    """A target admin; the topics named in its `made` list deleted at the end, and waited for."""
    with ClusterAdmin(stack.target, timeout_s=60) as admin:
        admin.made = []
        try:
            yield admin
        finally:
            made = set(admin.made) & set(admin.client.list_topics(timeout=10).topics)
            if made:
                for future in admin.client.delete_topics(sorted(made), operation_timeout=60).values():
                    future.result(timeout=60)
                wait_until(lambda: not made & set(admin.client.list_topics(timeout=10).topics),
                           f"the deletion of {len(made)} topics", 120)


def test_topics_with_more_partitions_than_one_request_takes_are_created_in_batches(stack, unique_name, target_admin):
    wanted = [NewTopic(f"{unique_name}-{i}", 3_400, 1, config={}) for i in range(3)]  # 10,200 partitions
    # An empty partition holds an open file on the broker until a minute after its deletion, and a broker
    # past its limit (20,000 here) fails its log directory and stops: an earlier run's are let go first
    def room() -> bool:
        files = open_files(stack.state_dir)
        return files is None or files[0] + 10_200 < 0.9 * files[1]

    wait_until(room, "room for 10,200 more open files on the target broker", 120, 1.0)
    whole = target_admin.client.create_topics(wanted, validate_only=True, request_timeout=60)
    refusals = [future.exception(timeout=60) for future in whole.values()]
    assert all(exc is not None and too_large(exc.args[0]) for exc in refusals), refusals  # one request: refused

    target_admin._admin = spy = Requests(target_admin.client)
    target_admin.made = [t.topic for t in wanted]
    made, existed, failure = create_all(target_admin, wanted)
    assert (made, existed, failure) == ({t.topic for t in wanted}, set(), None)
    assert spy.sent == [[wanted[0].topic, wanted[1].topic], [wanted[2].topic]]  # 6,802 and 3,401 records
    # the second request's topic is shown once the broker has made the first's 6,800 logs: waited for
    # past a short admin timeout
    with ClusterAdmin(stack.target, timeout_s=2) as short:
        wait_for_leaders(short, {t.topic: 3_400 for t in wanted})
    assert target_admin.partition_counts(t.topic for t in wanted) == {t.topic: 3_400 for t in wanted}


# 25 topic configs at Kafka's defaults: with its own record and one partition's, 27 records a topic, so
# that a few hundred one-partition topics pass the controller's limit (cheaper than 10,000 partitions)
DEFAULTS = {
    "cleanup.policy": "delete", "compression.gzip.level": "-1", "compression.lz4.level": "9",
    "compression.type": "producer", "compression.zstd.level": "3", "delete.retention.ms": "86400000",
    "file.delete.delay.ms": "60000", "flush.messages": "9223372036854775807", "flush.ms": "9223372036854775807",
    "index.interval.bytes": "4096", "max.compaction.lag.ms": "9223372036854775807", "max.message.bytes": "1048588",
    "message.timestamp.after.max.ms": "3600000", "message.timestamp.before.max.ms": "9223372036854775807",
    "message.timestamp.type": "CreateTime", "min.cleanable.dirty.ratio": "0.5", "min.compaction.lag.ms": "0",
    "min.insync.replicas": "1", "preallocate": "false", "retention.bytes": "-1", "retention.ms": "604800000",
    "segment.bytes": "1073741824", "segment.index.bytes": "10485760", "segment.jitter.ms": "0",
    "unclean.leader.election.enable": "false",
}


def test_a_request_the_controller_refuses_for_its_size_is_halved_and_the_halves_are_created(
        stack, unique_name, target_admin):
    wanted = [NewTopic(f"{unique_name}-{i:03d}", 1, 1, config=DEFAULTS) for i in range(380)]
    assert sum(map(topic_records, wanted)) == 10_260 > MAX_RECORDS_PER_REQUEST  # configs are records too
    target_admin._admin = spy = Requests(target_admin.client)
    target_admin.made = [t.topic for t in wanted]
    # planned as one request, as if the limit were twice Kafka's: the controller refuses it, the halves pass
    outcome = create_topics(target_admin, wanted, limit=2 * MAX_RECORDS_PER_REQUEST)
    assert outcome == {t.topic: None for t in wanted}
    names = [t.topic for t in wanted]
    assert spy.sent == [names, names[:190], names[190:]]
    target_admin.wait_for_topics(dict.fromkeys(names, 1))
    assert target_admin.partition_counts(names) == dict.fromkeys(names, 1)
    assert target_admin.topic_configs(names[-1], explicit_only=True) == DEFAULTS
