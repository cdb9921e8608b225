"""Where the mirror's steps read partition ends, they read them as every end is read
(kmigrate.kafka.ends.read, faked here by cluster): an unplanned failover's open transactions on the
DR cluster and the DR ends it promotes, the connector watch's safe readings, a failback's wait for
the original's transactions to be decided. Each reads the kinds of end its rule needs (high
watermark or last stable offset), and the test sees the rule follow them."""
from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
from kmigrate.config import ClusterConfig
from kmigrate.copy.writer import transactional_id
from kmigrate.errors import ConfigError
from kmigrate.kafka import ends as kafka_ends
from kmigrate.manifest import Manifest
from kmigrate.run.mirror import connectors, failback, promote
from kmigrate.run.mirror.status import STATUS_TIMEOUT_S

SOURCE = ClusterConfig.from_bootstrap("source", "127.0.0.1:1")
DR = ClusterConfig.from_bootstrap("target", "127.0.0.1:2")
KINDS = {kafka_ends.START: "start", kafka_ends.HIGH: "high", kafka_ends.STABLE: "stable"}


class Ends:
    """kafka.ends.read over the ends set here, {cluster name: {"high"/"stable": {key: offset}}}; each
    reading recorded as (cluster, keys, kinds, timeout_s)."""

    def __init__(self, **clusters: dict[str, dict[tuple[str, int], int]]) -> None:
        self.clusters = clusters
        self.readings: list[tuple[str, list, list[str], float]] = []

    def __call__(self, cluster, partitions, kinds, timeout_s, *, away=False, retry=False, names=None):
        assert retry and not away and not names  # a step's reading: tried again until its timeout (no renames here)
        keys = list(partitions)
        self.readings.append((cluster.name, keys, [KINDS[k] for k in kinds], timeout_s))
        return [{key: self.clusters[cluster.name][KINDS[k]][key] for key in keys} for k in kinds]


@pytest.fixture
def ends(monkeypatch):
    def install(**clusters):
        reader = Ends(**clusters)
        monkeypatch.setattr(kafka_ends, "read", reader)
        return reader
    return install


def test_an_unplanned_failover_fences_the_partitions_whose_last_stable_offset_is_below_the_high_watermark(
        ends, monkeypatch):
    keys = [("t", 0), ("t", 1)]
    dr = {"high": {("t", 0): 10, ("t", 1): 5}, "stable": {("t", 0): 7, ("t", 1): 5}}
    reader = ends(target=dr)
    fenced = []

    def fence(cluster, topic, partition, txn_id):  # the mirror's transaction aborted: the partition stable again
        fenced.append((cluster.name, topic, partition, txn_id))
        dr["stable"][(topic, partition)] = dr["high"][(topic, partition)]

    monkeypatch.setattr(promote.txn_wire, "fence", fence)
    assert promote.abort_open("run", DR, keys) == [{"topic": "t", "partition": 0, "from": 7, "to": 10}]
    assert fenced == [("target", "t", 0, transactional_id("run", "t", 0))]
    assert reader.readings == [("target", keys, ["stable", "high"], promote.READ_TIMEOUT_S),
                               ("target", [("t", 0)], ["stable"], promote.READ_TIMEOUT_S)]
    # another producer's transaction stays open after the mirror's id is fenced: named, nothing promoted
    dr["stable"][("t", 0)] = 7
    monkeypatch.setattr(promote.txn_wire, "fence", lambda *args: None)
    with pytest.raises(ConfigError, match=r"another producer are open on the DR cluster: t\[0\] from offset 7"):
        promote.abort_open("run", DR, keys)
    dr["stable"][("t", 0)] = 10
    assert promote.abort_open("run", DR, keys) == []


def test_a_connector_reading_is_kept_once_the_dr_clusters_stable_ends_reach_the_sources_high_watermarks(
        ends, monkeypatch, tmp_path):
    keys = [("t", 0)]
    source = {"high": {("t", 0): 10}, "stable": {("t", 0): 8}}
    dr = {"high": {("t", 0): 10}, "stable": {("t", 0): 4}}  # an open transaction on the DR cluster
    reader = ends(source=source, target=dr)
    monkeypatch.setattr(connectors, "snapshot_connectors", lambda connect, names: {"c": {"state": "RUNNING"}})
    manifest = Manifest(str(tmp_path), "m")
    watch = connectors.ConnectorWatch(manifest, SOURCE, DR, None, ["c"], every_s=3600.0, say=lambda line: None)
    watch.tick(keys)  # the first reading, its needs not yet known
    watch.tick(keys)  # needs the source's high watermark (10); the DR cluster holds 4 committed
    assert manifest.read(connectors.CONNECTORS) is None
    assert reader.readings == [("source", keys, ["high"], STATUS_TIMEOUT_S),
                               ("target", keys, ["stable"], STATUS_TIMEOUT_S)]
    dr["stable"][("t", 0)] = 10
    watch.tick(keys)
    assert manifest.read(connectors.CONNECTORS)["connectors"] == {"c": {"state": "RUNNING"}}


def test_a_failback_waits_for_the_originals_open_transactions_but_not_for_hanging_ones(ends, monkeypatch):
    original = {"high": {("t", 0): 5, ("t", 1): 8}, "stable": {("t", 0): 3, ("t", 1): 8}}
    reader = ends(source=original)
    admin = SimpleNamespace(timeout_s=30.0, partition_counts=lambda topics: {"t": 2})
    monkeypatch.setattr(failback, "ClusterAdmin", lambda cluster: contextlib.nullcontext(admin))
    asked = []

    def hanging(cluster, held):
        asked.append(dict(held))
        return {("t", 0): "a hanging transaction"} if len(asked) == 1 else {}

    monkeypatch.setattr(failback.txn_wire, "hanging", hanging)
    assert failback.decided(SOURCE, ["t"]) == {("t", 0): "a hanging transaction"}
    assert asked == [{("t", 0): 3}]  # held: its last stable offset below its high watermark
    assert reader.readings == [("source", [("t", 0), ("t", 1)], ["stable", "high"], 30.0)]
    monkeypatch.setattr(failback.time, "sleep", lambda s: original["stable"].update({("t", 0): 5}))
    assert failback.decided(SOURCE, ["t"]) == {}  # open, then decided (its abort's marker written)
    assert asked[1:] == [{("t", 0): 3}] and len(reader.readings) == 3


def test_a_reading_under_the_targets_names_asks_for_them_and_answers_by_the_names_given(monkeypatch):
    asked = []

    def read_once(cluster, partitions, kinds, timeout_s, *, away):  # noqa: ANN001, ANN202
        asked.append(list(partitions))
        return [{k: 10 * i + k[1] for k in partitions} for i, _ in enumerate(kinds)]

    monkeypatch.setattr(kafka_ends, "_read_once", read_once)
    keys = [("orders", 0), ("orders", 1), ("kept", 0)]
    starts, highs = kafka_ends.read(DR, keys, (kafka_ends.START, kafka_ends.HIGH), 1.0,
                                    names={"orders": "a.orders", "other": "a.other"})
    assert asked == [[("a.orders", 0), ("a.orders", 1), ("kept", 0)]]
    assert starts == {("orders", 0): 0, ("orders", 1): 1, ("kept", 0): 0}
    assert highs == {("orders", 0): 10, ("orders", 1): 11, ("kept", 0): 10}
