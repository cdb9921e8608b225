"""The mirror's metrics scraped over HTTP while it runs (kmigrate.run.report.metrics), on the real stack,
the mirror's driver in this process: under a live producer the lag series follow the status file
round by round, each partition's and topic's; once the producer stops and the mirror catches up
they read 0; the copied-records counter only grows."""
from __future__ import annotations

import re
import urllib.request

from kmigrate.manifest import Manifest
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.report.metrics import Exporter
from kmigrate.run.mirror.spec import MirrorSpec

from tests.support.apps import Writer
from tests.support.kafka import create_topic
from tests.support.mirror import mirrored, wait_caught_up, wait_for_round
from tests.support.waiting import wait_until

PARTITIONS = 3


def _scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if not line.startswith("#")}


def test_the_scraped_lag_follows_the_mirror_status_and_reads_0_once_caught_up(stack, unique_name, tmp_path):
    topic = f"{unique_name}.orders"
    create_topic(stack.source, topic, PARTITIONS)
    state = tmp_path / "state"
    manifest = Manifest(str(state), "metered")
    spec = MirrorSpec(re.escape(topic), interval_s=0.5, verify_every_s=2.0, term_s=60.0)
    exporter = Exporter(str(state), port=0).start()
    writer = Writer(stack.source, topic, PARTITIONS)
    run = 'run="metered"'
    try:
        with mirrored(stack, manifest, spec):
            wait_for_round(manifest, 1, timeout_s=120)
            writer.start()
            wait_until(lambda: writer.sent >= 2000, "the producer writing", 60)
            for _ in range(3):  # a scrape between two status rounds shows the round it read, and its lag
                before = mirror_status.read(manifest)
                scraped = _scrape(exporter.port)
                after = mirror_status.read(manifest)
                seen = scraped[f"kmigrate_mirror_status_round{{{run}}}"]
                assert before["round"] <= seen <= after["round"], (before["round"], seen, after["round"])
                if seen == after["round"]:
                    assert scraped[f"kmigrate_mirror_lag_records{{{run}}}"] == after["behind_records"]
                    for p in after["partitions"]:
                        key = f'kmigrate_mirror_partition_lag_records{{{run},topic="{topic}",partition="{p["partition"]}"}}'
                        assert scraped[key] == p["behind_records"]
            copied = scraped[f"kmigrate_mirror_records_copied_total{{{run}}}"]
            writer.stop()
            wait_caught_up(manifest, stack.source, {topic: PARTITIONS}, timeout_s=120)
            scraped = _scrape(exporter.port)
            assert scraped[f"kmigrate_mirror_lag_records{{{run}}}"] == 0
            assert scraped[f'kmigrate_mirror_topic_lag_records{{{run},topic="{topic}"}}'] == 0
            assert scraped[f"kmigrate_mirror_records_copied_total{{{run}}}"] >= copied
            assert scraped[f"kmigrate_mirror_stopped{{{run}}}"] == 0
        assert _scrape(exporter.port)[f"kmigrate_mirror_stopped{{{run}}}"] == 1  # its last status says stopped
    finally:
        writer.stop()
        exporter.stop()
