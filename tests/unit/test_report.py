"""The report's per-topic outcome and its chart, from a hand-written run manifest."""
from __future__ import annotations

import pytest
from kmigrate.errors import ConfigError
from kmigrate.manifest import Manifest
from kmigrate.run.report.markdown import copy_chart, summarize, topic_result, write_report


def copy_row(topic, partition, records, seconds):
    return {"ok": True, "topic": topic, "partition": partition, "records": records, "bytes": records * 10,
            "fillers": 0, "markers": 0, "copy_seconds": seconds, "align_seconds": 0.0}


@pytest.fixture
def manifest(tmp_path):
    m = Manifest(str(tmp_path), "run-1")
    m.write_once("snapshot", {"taken_at": "2026-11-22T00:00:00+00:00", "source": "localhost:1", "groups": {},
                              "connectors": {},
                              "topics": {"orders": {"partitions": [{"partition": 0, "log_start": 0, "end": 50},
                                                                   {"partition": 1, "log_start": 5, "end": 40}]},
                                         "audit": {"partitions": [{"partition": 0, "log_start": 0, "end": 7}]}}})
    m.write_once("copy-results/20261122T000001Z-a", {"rows": [copy_row("orders", 0, 30, 1.5),
                                                              copy_row("orders", 1, 35, 0.5),
                                                              copy_row("audit", 0, 7, 0.1)]})
    m.write_once("copy-results/20261122T000002Z-b", {"rows": [copy_row("orders", 0, 20, 1.0)]})
    m.write_once("verification/20261122T000003Z-c", {"rows": [
        {"topic": "orders", "partition": 0, "equal": True, "problems": []},
        {"topic": "orders", "partition": 1, "equal": False, "problems": ["digest differs"]},
        {"topic": "audit", "partition": 0, "equal": True, "problems": []}]})
    return m


def test_topic_result_sums_attempts_and_names_unequal_partitions(manifest):
    orders = topic_result(manifest, "orders")
    assert (orders["partitions"], orders["equal"], orders["records"]) == (2, 1, 85)
    assert orders["rows"][0] == {"partition": 0, "log_start": 0, "end": 50, "records": 50, "bytes": 500,
                                 "fillers": 0, "seconds": 2.5, "attempts": 2, "verified": "equal",
                                 "verified_when": "-"}
    assert orders["rows"][1]["verified"] == "digest differs"
    assert topic_result(manifest, "audit")["equal"] == 1
    with pytest.raises(ConfigError, match="'missing' is not in the snapshot of run run-1"):
        topic_result(manifest, "missing")


def test_report_has_a_topic_table_and_a_chart(manifest, tmp_path):
    png = copy_chart(summarize(manifest))
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    path, summary = write_report(manifest)
    text = (tmp_path / "run-1" / "report.md").read_text()
    assert "| orders | 2 | 85 | 850 | 0 | 3.00 | 1 of 2 |" in text
    assert "![Copy time per partition](copy-times.png)" in text
    assert summary["chart_path"].endswith("run-1/copy-times.png")
    assert (tmp_path / "run-1" / "copy-times.png").read_bytes() == png


def test_no_chart_when_nothing_was_copied(tmp_path):
    m = Manifest(str(tmp_path), "empty")
    assert copy_chart(summarize(m)) is None
    _, summary = write_report(m)
    assert "chart_path" not in summary


def test_a_report_of_many_partitions_lists_only_what_differs(tmp_path, monkeypatch):
    """Past ROWS_MAX partitions (20,000 here) the report's partition table lists the partitions not
    verified equal, and its group table a row a group with the offsets whose metadata differs: the
    report stays readable (its size does not grow with the partitions), the manifest keeps every row."""
    from kmigrate.run.report import markdown

    m = Manifest(str(tmp_path), "big")
    topics = {f"t{i:03d}": {"partitions": [{"partition": p, "log_start": 0, "end": 10} for p in range(100)]}
              for i in range(200)}
    m.write_once("snapshot", {"taken_at": "2026-12-06T00:00:00Z", "groups": {"g": {}}, "connectors": {},
                              "topics": topics})
    m.write_once("copy-results/20261206T000001Z-a", {"rows": [copy_row(t, p, 10, 0.01) for t in topics
                                                              for p in range(100)]})
    m.write_once("verification/20261206T000002Z-b", {"rows": [
        {"topic": t, "partition": p, "equal": (t, p) != ("t042", 7), "problems": [] if (t, p) != ("t042", 7) else
         ["digest differs"]} for t in topics for p in range(100)]})
    m.write_once("group-replication/20261206T000003Z-c", {"groups": [{"group": "g", "offsets": [
        {"topic": t, "partition": p, "source_offset": 5, "target_offset": 5, "metadata": "",
         "metadata_equal": (t, p) != ("t001", 3)} for t in topics for p in range(100)]}]})
    _, summary = write_report(m)
    text = (tmp_path / "big" / "report.md").read_text()
    assert summary["partitions"] == 20_000 and summary["partitions_equal"] == 19_999
    assert "Listed: those not verified equal (1)" in text
    assert "| t042 | 7 | 0 | 10 | 10 |" in text and "| t042 | 8 |" not in text
    assert "| g | 20000 | 1 |" in text and "| g | t001[3] | 5 | 5 | DIFFERS |" in text and "t001[4]" not in text
    assert len(text.splitlines()) < 200 + 2 * markdown.ROWS_MAX  # a topic row each, and what differs
    monkeypatch.setattr(markdown, "ROWS_MAX", 20_000)  # at or below the bound: every row, as before
    _, _ = write_report(Manifest(str(tmp_path), "big"))
    assert len((tmp_path / "big" / "report.md").read_text().splitlines()) > 40_000
