"""The mirrors' metrics in Prometheus's text format (kmigrate.run.report.metrics), from mirror statuses:
the names, labels and values a Prometheus server scrapes, lag by topic always and by partition only
for small mirrors, label values escaped, and the exporter's HTTP answer over a state location."""
from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from kmigrate.manifest import Manifest
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror.driver import VERIFIED
from kmigrate.run.report.metrics import Exporter, families, render


def _status(partitions=None, **more):
    return {"round": 12, "term": 3, "heartbeat": "2026-12-07T01:00:00.000+00:00", "stopped": False,
            "behind_records": 7, "behind_s_max": 0.42, "failed_partitions": 1,
            "partitions": partitions if partitions is not None else [
                {"topic": "orders", "partition": 0, "behind_records": 5, "behind_s": 0.42},
                {"topic": "orders", "partition": 1, "behind_records": 2, "behind_s": 0.1},
                {"topic": 'we"ird', "partition": 0, "behind_records": 0, "behind_s": 0.0}],
            "groups": [{"group": "a", "partitions": 1}, {"group": "b", "skipped": "members"},
                       {"group": "c", "moved": "moved", "at": "x"}],
            "totals": {"records": 1000, "offsets": 1010, "failed_rounds": 2},
            "promoted": [{"topic": "payments", "split_brain": [{"partition": 0, "records": 3, "first_offset": 9}]}], **more}


def _samples(text):
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if not line.startswith("#")}


def test_a_mirror_status_becomes_samples_named_by_the_conventions():
    text = render(families([("dr", _status(), [{"topic": "orders", "records": 40, "equal": True},
                                                {"topic": "orders", "records": 2, "equal": False}])]))
    s = _samples(text)
    assert s['kmigrate_mirror_heartbeat_timestamp_seconds{run="dr"}'] == 1796605200.0
    assert s['kmigrate_mirror_lag_records{run="dr"}'] == 7 and s['kmigrate_mirror_lag_seconds{run="dr"}'] == 0.42
    assert s['kmigrate_mirror_topic_lag_records{run="dr",topic="orders"}'] == 7
    assert s['kmigrate_mirror_partition_lag_records{run="dr",topic="orders",partition="1"}'] == 2
    assert s['kmigrate_mirror_topic_lag_records{run="dr",topic="we\\"ird"}'] == 0  # a quote in a label escaped
    assert s['kmigrate_mirror_records_copied_total{run="dr"}'] == 1000  # a counter's sample ends in _total
    assert s['kmigrate_mirror_groups{run="dr",state="synced"}'] == 1 and s['kmigrate_mirror_groups{run="dr",state="moved"}'] == 1
    assert s['kmigrate_mirror_split_brain_records{run="dr",topic="payments"}'] == 3
    assert s['kmigrate_mirror_verified_records{run="dr",topic="orders"}'] == 42
    assert s['kmigrate_mirror_unequal_partitions{run="dr"}'] == 1
    assert "# TYPE kmigrate_mirror_records_copied counter" in text and "# TYPE kmigrate_mirror_lag_records gauge" in text


def test_what_a_mirror_leaves_out_is_counted_by_kind_and_a_status_from_before_counts_none():
    left_out = {"topics": {"a_b": "clashes"}, "groups": {"g1": "taken", "g2": "empty"}}
    s = _samples(render(families([("dr", _status(not_mirrored=left_out), []), ("old", _status(), [])])))
    assert s['kmigrate_mirror_not_mirrored{run="dr",kind="topic"}'] == 1
    assert s['kmigrate_mirror_not_mirrored{run="dr",kind="group"}'] == 2
    assert s['kmigrate_mirror_not_mirrored{run="old",kind="group"}'] == 0


def test_a_large_mirror_is_exposed_by_topic_only():
    many = [{"topic": f"t{i % 3}", "partition": i, "behind_records": 1, "behind_s": 0.0} for i in range(101)]
    s = _samples(render(families([("big", _status(many), [])], per_partition_max=100)))
    assert not any(k.startswith("kmigrate_mirror_partition_lag_records{") for k in s)
    assert sum(v for k, v in s.items() if k.startswith("kmigrate_mirror_topic_lag_records{")) == 101


def test_the_exporter_serves_every_mirror_of_a_state_location_and_nothing_else(tmp_path):
    mirror_status.write(Manifest(str(tmp_path), "dr-a"), _status())
    b = Manifest(str(tmp_path), "dr-b")
    mirror_status.write(b, _status(stopped=True), stopped=True)
    b.replace(VERIFIED, {"rows": [{"topic": "orders", "partition": 0, "records": 5, "equal": True}]})
    Manifest(str(tmp_path), "a-migration").replace("snapshot", {"topics": {}})  # no mirror: a run's series only
    exporter = Exporter(str(tmp_path), port=0).start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{exporter.port}/metrics", timeout=10) as resp:
            assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            s = _samples(resp.read().decode())
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(f"http://127.0.0.1:{exporter.port}/", timeout=10)
    finally:
        exporter.stop()
    assert s['kmigrate_mirror_stopped{run="dr-a"}'] == 0 and s['kmigrate_mirror_stopped{run="dr-b"}'] == 1
    assert s['kmigrate_mirror_verified_records{run="dr-b",topic="orders"}'] == 5
    assert not any('run="a-migration"' in k for k in s if k.startswith("kmigrate_mirror_"))
    assert s['kmigrate_run_finished{run="a-migration"}'] == 0
