"""A whole migration through the kafka_migration DAG between Kafka versions, to a KRaft target:
the mixed workload (plain, compacted with deletes, transactional with aborts, a log start above 0,
two groups, a FileStreamSource and a FileStreamSink connector) on the compat profile of the stack
(`stack.py --source-version V [--target-version T]`: brokers, ZooKeeper-era before 4.0, and Connect
of that version). The pairs come from $KMIGRATE_COMPAT_VERSIONS, each SOURCE (to a 4.3.1 target) or
SOURCE:TARGET (default 3.9.1; `make test-compat` runs 2.8.2, 3.9.1, 4.3.1 and 4.4.0 to 4.3.1, and
4.3.1 to 4.4.0); each records its figures to $KMIGRATE_COMPAT_RESULTS for the make target's lines."""
from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from confluent_kafka import Producer
from kmigrate.claims.runs import claim_topics
from kmigrate.config import ClusterConfig
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.connect import ConnectClient
from kmigrate.manifest import Manifest
from kmigrate.run.connectors import old_connect
from kmigrate.run.report.markdown import summarize
from kmigrate_demo.workload import seed_mixed

from tests.support import copier, results
from tests.support.airflow import run_dag, task_states
from tests.support.connect import delete_connectors
from tests.support.kafka import all_watermarks as topic_watermarks
from tests.support.kafka import create_topic, records_of
from tests.support.migration import assert_migrated_exactly, assert_workload_continues_on_target, partition_watermarks
from tests.support.stack import Stack, close_pooled_clients, load_stack_module

VERSIONS = os.environ.get("KMIGRATE_COMPAT_VERSIONS", "3.9.1").split(",")
RESULTS_ENV = "KMIGRATE_COMPAT_RESULTS"
CONNECTIONS = {"source_kafka_conn_id": "compat_kafka_source", "target_kafka_conn_id": "compat_kafka_target",
               "source_connect_conn_id": "compat_connect_source", "target_connect_conn_id": "compat_connect_target"}


@pytest.fixture(scope="module", params=VERSIONS)
def compat_stack(request) -> Iterator[Stack]:
    """The compat profile for one pair of versions: used if running, started otherwise; what it starts
    it stops again, by pid, after that pair's tests."""
    stack_mod = load_stack_module()
    source_version, target_version = _versions(request.param, stack_mod.KAFKA_VERSION)
    clusters = stack_mod.compat_clusters(source_version, target_version)
    state_dir = stack_mod.compat_state_dir(source_version, target_version).resolve()
    started = stack_mod.up(clusters, state_dir, timeout_s=240)
    source, target = clusters
    try:
        yield Stack(ClusterConfig.from_bootstrap("source", source.bootstrap),
                    ClusterConfig.from_bootstrap("target", target.bootstrap),
                    ConnectClient(source.connect_url), ConnectClient(target.connect_url), state_dir)
    finally:
        close_pooled_clients()  # the next pair's stack takes the same ports
        stack_mod.stop_all(started)


def _versions(param: str, default_target: str) -> tuple[str, str]:
    """(source version, target version) of a KMIGRATE_COMPAT_VERSIONS item: SOURCE or SOURCE:TARGET."""
    source, _, target = param.partition(":")
    return source, target or default_target


def _pair(request) -> tuple[str, str, str]:  # noqa: ANN001 - pytest's request
    """The test's source version, target version, and their name in the results ("S -> T")."""
    source, target = _versions(request.node.callspec.params["compat_stack"], load_stack_module().KAFKA_VERSION)
    return source, target, f"{source} -> {target}"


def connector_offsets_equal(stack: Stack, connectors: dict) -> bool:
    """Each connector's offsets on the target (the REST API of its 4.3.1 worker) equal what the
    source worker holds, read the way the run read them (offsets equal across: the copy keeps them)."""
    infos = {name: stack.source_connect.info(name) for name in connectors}
    with ClusterAdmin(stack.source) as admin:
        on_source = old_connect.connector_offsets(stack.source_connect, infos, admin)
    canonical = lambda offsets: sorted(json.dumps(o, sort_keys=True) for o in offsets)  # noqa: E731
    return all(on_source[name][0] and canonical(on_source[name][0]) == canonical(stack.target_connect.offsets(name))
               for name in connectors)


def test_a_mixed_workload_migrates_from_an_older_source(compat_stack, dagbag, tmp_path, request):
    stack = compat_stack
    version, target_version, pair = _pair(request)
    prefix = f"compat{version.replace('.', '')}x{os.urandom(3).hex()}"
    w = seed_mixed(stack.source, stack.source_connect, prefix, tmp_path / "workload", records=300)
    state = tmp_path / "state"
    try:
        conf = {**CONNECTIONS, "topics_include": w.topic_pattern, "groups": w.group_pattern,
                "connectors": [w.source_connector, w.sink_connector],
                "connector_overrides": {w.sink_connector: {"file": str(w.sink_file_target)}},
                "quiesce_seconds": 2, "state_location": str(state), "run_name": prefix}
        source_before = partition_watermarks(stack.source, w.topics)
        run = run_dag(dagbag, **conf)
        manifest = Manifest(str(state), prefix)
        summary = summarize(manifest)
        figures = {k: summary.get(k) for k in ("partitions", "partitions_equal", "groups", "groups_exact",
                                                "connectors", "connectors_resumed")}
        connectors = summary["_snapshot"]["connectors"]
        offsets_equal = run.state == "success" and connector_offsets_equal(stack, connectors)
        results.record(RESULTS_ENV, pair=pair, source_version=version, target_version=target_version,
                       run_state=str(run.state), **figures,
                       connector_offsets_equal=offsets_equal,
                       stopped_by=sorted({c["stopped_by"] for c in connectors.values()}))
        assert str(run.state) == "success", task_states(run)
        assert summary["partitions"] == sum(w.topics.values()) == summary["partitions_equal"]
        assert summary["groups"] == summary["groups_exact"] == 2
        assert summary["connectors"] == summary["connectors_resumed"] == 2
        assert_migrated_exactly(stack.source, stack.target, w.topics, w.groups, source_before)
        # an old worker (before 3.5) is paused and its offsets read from Kafka; a newer one stopped, offsets by REST
        old = tuple(int(x) for x in version.split(".")[:2]) < (3, 5)
        assert {c["stopped_by"] for c in connectors.values()} == {"pause" if old else "stop"}
        assert offsets_equal
        assert "## Versions and methods" in (state / prefix / "report.md").read_text()
    finally:
        delete_connectors((stack.source_connect, stack.target_connect), (w.source_connector, w.sink_connector))


# Every path of the copy against the older source: the copier's own scenarios (tests/support/copier.py,
# tests/integration/test_copier.py runs them on the default stack), run on the compat profile.

@pytest.fixture
def untouched(compat_stack):
    """As tests/integration's source_untouched, on the older source."""
    watched: dict[str, list] = {}
    yield lambda topic: watched.setdefault(topic, topic_watermarks(compat_stack.source, topic))
    for topic, before in watched.items():
        assert topic_watermarks(compat_stack.source, topic) == before, f"source topic {topic} changed"


def test_whole_batches_from_an_older_source(compat_stack, unique_name, untouched):
    copier.plain_topic_keeps_offsets_and_content(compat_stack, unique_name, untouched)


@pytest.mark.parametrize("fast_alignment", [True, False], ids=["record-batches", "producer"])
def test_a_log_start_above_zero_on_an_older_source(compat_stack, unique_name, untouched, fast_alignment):
    copier.log_start_above_zero_is_aligned(compat_stack, unique_name, untouched, fast_alignment, "delete")


def test_compaction_gaps_on_an_older_source(compat_stack, unique_name, untouched):
    copier.compacted_topic_keeps_offsets_and_visible_records(compat_stack, unique_name, untouched)


@pytest.mark.parametrize("raw_batches", [True, False], ids=["whole-batches", "records"])
def test_transactions_with_aborts_from_an_older_source(compat_stack, unique_name, untouched, raw_batches):
    copier.transactional_topic_keeps_offsets_and_visibility(compat_stack, unique_name, untouched, raw_batches)


def _produce(cluster: ClusterConfig, topic: str, records: list[tuple[bytes | None, bytes | None]], **settings) -> None:
    producer = Producer(cluster.producer(**{"linger.ms": 5, **settings}))
    for key, value in records:
        producer.produce(topic, key=key, value=value, partition=0)
        producer.poll(0)
    assert producer.flush(30) == 0


def test_old_message_formats_and_configs_kafka_4_removed(compat_stack, dagbag, tmp_path, request):
    """Logs of a cluster upgraded from 0.9/0.10: batches of format v0 (plain, gzip and lz4 wrappers)
    and v1 (a compacted topic the cleaner has worked on), and topic configs that Kafka 4 removed
    (message.format.version, message.downconversion.enable, message.timestamp.difference.max.ms).
    Every partition migrates equal through the DAG; the removed configs are mapped or dropped and the
    report names each. Formats below v2 exist only on sources before 3.0 (KIP-724)."""
    version, target_version, pair = _pair(request)
    if tuple(int(x) for x in version.split(".")[:2]) >= (3, 0):
        pytest.skip(f"Kafka {version} writes every batch in format v2")
    stack = compat_stack
    prefix = f"formats{os.urandom(3).hex()}"
    topics = {f"{prefix}.v0": {"message.format.version": "0.9.0"},
              f"{prefix}.v1": {"message.format.version": "0.10.2", "cleanup.policy": "compact", "segment.ms": "100",
                               "min.cleanable.dirty.ratio": "0.01"},
              f"{prefix}.configs": {"message.downconversion.enable": "false",
                                    "message.timestamp.difference.max.ms": "86400000"}}
    for topic, config in topics.items():
        create_topic(stack.source, topic, 1, config)
    for codec in ("none", "gzip", "lz4"):
        _produce(stack.source, f"{prefix}.v0", [(f"{codec}-{i}".encode(), b"v0" * (i % 40)) for i in range(300)],
                 **{"compression.type": codec})
    for round_ in range(4):  # rolled segments the cleaner compacts: gaps of removed keys
        _produce(stack.source, f"{prefix}.v1", [(f"k{i % 25}".encode(), None if i % 9 == 0 else f"{round_}-{i}".encode())
                                               for i in range(200)], **{"compression.type": "gzip"})
    _produce(stack.source, f"{prefix}.configs", [(None, f"r{i}".encode()) for i in range(100)])
    state = tmp_path / "state"
    source_before = partition_watermarks(stack.source, dict.fromkeys(topics, 1))
    run = run_dag(dagbag, **{**CONNECTIONS, "topics_include": rf"{prefix}\..*", "quiesce_seconds": 2,
                             "state_location": str(state), "run_name": prefix})
    summary = summarize(Manifest(str(state), prefix))
    results.record(RESULTS_ENV, pair=f"{pair} v0/v1 formats", source_version=version, target_version=target_version,
                   run_state=str(run.state),
                   partitions=summary["partitions"], partitions_equal=summary["partitions_equal"], groups=0,
                   groups_exact=0, connectors=0, connectors_resumed=0, connector_offsets_equal=True, stopped_by=[],
                   configs_mapped=sorted({n for c in summary["config_versions"].values() for n in c}))
    assert str(run.state) == "success", task_states(run)
    assert summary["partitions"] == summary["partitions_equal"] == 3
    assert_migrated_exactly(stack.source, stack.target, dict.fromkeys(topics, 1), [], source_before)
    v0 = records_of(stack.target, f"{prefix}.v0", 0)
    assert len(v0) == 900 and {ts for *_, ts in v0} == {-1}  # format v0 has no timestamps: none on the target
    assert {n for c in summary["config_versions"].values() for n in c} == {
        "message.format.version", "message.downconversion.enable", "message.timestamp.difference.max.ms"}
    with ClusterAdmin(stack.target) as target:
        configs = target.topic_configs(f"{prefix}.configs")
    assert configs["message.timestamp.before.max.ms"] == configs["message.timestamp.after.max.ms"] == "86400000"
    assert "Source configs that the target's Kafka version removed" in (state / prefix / "report.md").read_text()


def test_two_sources_consolidated_into_one_target_each_under_its_prefix(compat_stack, stack, dagbag, tmp_path):
    """A consolidation (issue 67): the default stack's source and the compat profile's (an older
    Kafka) hold the same workload under the same names (a plain topic, a compacted one,
    transactions with aborts, log starts above zero, two consumer groups, a file source and a file
    sink connector), moved into one target (the default stack's, its one Connect cluster) as `a.`
    and `b.`. Run a holds its claim on its target names while run b runs: they share none. Every
    partition is equal under its new name on the one target, each group's offsets sit in its
    renamed group and its consumers continue there, both sides' connectors continue on the target
    at their offsets on their renamed topics, and neither source is written to."""
    prefix = f"consol{os.urandom(3).hex()}"
    sides = {"a": (stack, {}),
             "b": (compat_stack, {"source_kafka_conn_id": CONNECTIONS["source_kafka_conn_id"],
                                  "source_connect_conn_id": CONNECTIONS["source_connect_conn_id"]})}
    workloads = {k: seed_mixed(s.source, s.source_connect, prefix, tmp_path / f"workload-{k}", records=200,
                               connectors=f"{prefix}-{k}")  # one Connect cluster on the target: names of their own
                 for k, (s, _) in sides.items()}
    try:
        before = {k: partition_watermarks(s.source, workloads[k].topics) for k, (s, _) in sides.items()}
        states = {k: tmp_path / f"state-{k}" for k in sides}
        # run a's claim, taken as its own trigger would take it, held while run b runs
        claim_topics(stack.target, f"{prefix}-a", [f"a.{t}" for t in workloads["a"].topics],
                     deployment=Manifest(str(states["a"]), f"{prefix}-a").state_location)
        for k in ("b", "a"):
            w = workloads[k]
            run = run_dag(dagbag, **sides[k][1], topics_include=w.topic_pattern, groups=w.group_pattern,
                          connectors=[w.source_connector, w.sink_connector],
                          connector_overrides={w.sink_connector: {"file": str(w.sink_file_target)}},
                          topic_prefix=f"{k}.", group_prefix=f"{k}.", quiesce_seconds=2,
                          state_location=str(states[k]), run_name=f"{prefix}-{k}")
            assert str(run.state) == "success", (k, task_states(run))
        for k, (side, _) in sides.items():
            w = workloads[k]
            assert partition_watermarks(side.source, w.topics) == before[k]  # the source was never written to
            with ClusterAdmin(stack.target) as target, ClusterAdmin(side.source) as source:
                for (topic, partition), marks in before[k].items():
                    assert target.watermarks(f"{k}.{topic}", partition) == marks, (k, topic, partition)
                    assert records_of(stack.target, f"{k}.{topic}", partition) == records_of(side.source, topic,
                                                                                            partition)
                for group in w.groups:
                    assert target.committed(f"{k}.{group}") == {
                        (f"{k}.{t}", p): c for (t, p), c in source.committed(group).items()}, (k, group)
            summary = summarize(Manifest(str(states[k]), f"{prefix}-{k}"))
            assert summary["partitions"] == summary["partitions_equal"] == sum(w.topics.values())
            assert summary["groups"] == summary["groups_exact"] == 2
            assert summary["connectors"] == summary["connectors_resumed"] == 2
            assert stack.target_connect.config(w.sink_connector)["topics"] == f"{k}.{w.topic('orders')}"
            assert_workload_continues_on_target(SimpleNamespace(source=side.source, target=stack.target), w,
                                                {t: f"{k}.{t}" for t in w.topics},
                                                {g: f"{k}.{g}" for g in w.groups})
        with ClusterAdmin(stack.target) as target:
            assert not set(target.list_topics()) & set(workloads["a"].topics)  # only the renamed names
    finally:
        for k, (side, _) in sides.items():
            delete_connectors((side.source_connect, stack.target_connect),
                              (workloads[k].source_connector, workloads[k].sink_connector))
