"""A whole migration through the kafka_migration DAG from an older source to a 4.3.1 KRaft target:
the mixed workload (plain, compacted with deletes, transactional with aborts, a log start above 0,
two groups, a FileStreamSource and a FileStreamSink connector) on the compat profile of the stack
(`stack.py --source-version V`: ZooKeeper-era brokers and Connect of that version). The versions
come from $KMIGRATE_COMPAT_VERSIONS (default 3.9.1; `make test-compat` runs 2.8.2, 3.9.1 and 4.3.1);
each records its figures to $KMIGRATE_COMPAT_RESULTS for the make target's last line."""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from kmigrate import claims
from kmigrate.config import ClusterConfig
from kmigrate.kafka import pool, wire
from kmigrate.kafka.connect import ConnectClient
from kmigrate.manifest import Manifest
from kmigrate.run.report import summarize
from kmigrate.workload import seed_mixed

from tests import results
from tests.conftest import Stack, load_stack_module
from tests.dags.test_kafka_migration import (
    all_watermarks,
    assert_migrated_exactly,
    delete_connectors,
    run_dag,
    task_states,
)

VERSIONS = os.environ.get("KMIGRATE_COMPAT_VERSIONS", "3.9.1").split(",")
RESULTS_ENV = "KMIGRATE_COMPAT_RESULTS"
CONNECTIONS = {"source_kafka_conn_id": "compat_kafka_source", "target_kafka_conn_id": "compat_kafka_target",
               "source_connect_conn_id": "compat_connect_source", "target_connect_conn_id": "compat_connect_target"}


@pytest.fixture(scope="module", params=VERSIONS)
def compat_stack(request) -> Iterator[Stack]:
    """The compat profile for one source version: used if running, started otherwise; what it starts
    it stops again, by pid, after that version's tests."""
    stack_mod = load_stack_module()
    version = request.param
    clusters = stack_mod.compat_clusters(version)
    state_dir = Path(f"{stack_mod.COMPAT_STATE_DIR}-{version}").resolve()
    started = stack_mod.up(clusters, state_dir, timeout_s=240)
    source, target = clusters
    try:
        yield Stack(ClusterConfig.from_bootstrap("source", source.bootstrap),
                    ClusterConfig.from_bootstrap("target", target.bootstrap),
                    ConnectClient(source.connect_url), ConnectClient(target.connect_url), state_dir)
    finally:
        stack_mod.stop_all(started)
        # this process's pooled clients of these clusters: the next version's stack takes the same ports
        pool.admins.close_all()
        wire.connections.close_all()
        claims.close_all()


def test_a_mixed_workload_migrates_from_an_older_source(compat_stack, dagbag, tmp_path, request):
    stack = compat_stack
    version = request.node.callspec.params["compat_stack"]
    prefix = f"compat{version.replace('.', '')}x{os.urandom(3).hex()}"
    w = seed_mixed(stack.source, stack.source_connect, prefix, tmp_path / "workload", records=300)
    state = tmp_path / "state"
    try:
        conf = {**CONNECTIONS, "topics_include": w.topic_pattern, "groups": w.group_pattern,
                "connectors": [w.source_connector, w.sink_connector],
                "connector_overrides": {w.sink_connector: {"file": str(w.sink_file_target)}},
                "quiesce_seconds": 2, "state_location": str(state), "run_name": prefix}
        source_before = all_watermarks(stack.source, w.topics)
        run = run_dag(dagbag, **conf)
        summary = summarize(Manifest(str(state), prefix))
        figures = {k: summary.get(k) for k in ("partitions", "partitions_equal", "groups", "groups_exact",
                                                "connectors", "connectors_resumed")}
        results.record(RESULTS_ENV, source_version=version, run_state=str(run.state), **figures)
        assert str(run.state) == "success", task_states(run)
        assert summary["partitions"] == sum(w.topics.values()) == summary["partitions_equal"]
        assert summary["groups"] == summary["groups_exact"] == 2
        assert summary["connectors"] == summary["connectors_resumed"] == 2
        assert_migrated_exactly(stack.source, stack.target, w.topics, w.groups, source_before)
    finally:
        delete_connectors((stack.source_connect, stack.target_connect), (w.source_connector, w.sink_connector))
