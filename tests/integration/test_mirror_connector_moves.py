"""A Connect pipeline moved onto the DR cluster while the mirror runs (kmigrate.run.mirror.connector_moves),
on the real stack, the mirror's driver in this process: a FileStreamSource reads a file that grows
all along into a topic, a FileStreamSink writes the topic to a file. The sink moves first (with the
consumers): stopped on the source, placed on the DR Connect cluster with its offsets, it writes a
file of its own there from where it stopped. Then the source moves with the producers: stopped on the
source, its topic promoted, placed on the DR Connect cluster with its offsets, it goes on reading the
file where it stopped. Every line of the input ends in the two sink files once, in order, and on the
DR topic once, in order."""
from __future__ import annotations

import re
import threading

import pytest
from kmigrate.errors import ConfigError
from kmigrate.manifest import Manifest
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror.connector_moves import mirrored_topics, move_sinks, part
from kmigrate.run.mirror.producer_moves import promote_topics
from kmigrate.run.mirror.spec import MirrorSpec

from tests.support.connect import FILE_SINK, delete_connectors, file_source_config, lines_of
from tests.support.kafka import create_topic, records_of
from tests.support.mirror import mirrored, wait_for_round
from tests.support.waiting import wait_until


class Appender(threading.Thread):
    """Lines appended to a file, a few every 20 ms, until stopped."""

    def __init__(self, path) -> None:  # noqa: ANN001
        super().__init__(daemon=True)
        self.path, self.written, self.stopping = path, 0, threading.Event()

    def run(self) -> None:
        with self.path.open("a") as out:
            while not self.stopping.wait(0.02):
                for _ in range(5):
                    out.write(f"line-{self.written}\n")
                    self.written += 1
                out.flush()

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)


def test_a_connect_pipeline_moved_sink_first_then_source_loses_and_repeats_no_line(stack, unique_name, tmp_path):
    topic, source_name, sink_name = f"{unique_name}.lines", f"{unique_name}-src", f"{unique_name}-sink"
    create_topic(stack.source, topic, 1)
    given, on_source, on_dr = tmp_path / "in.txt", tmp_path / "out-source.txt", tmp_path / "out-dr.txt"
    given.touch()
    manifest = Manifest(str(tmp_path / "state"), "connectors")
    spec = MirrorSpec(re.escape(topic), interval_s=0.5, verify_every_s=2.0, term_s=60.0)
    clients = (stack.source_connect, stack.target_connect)
    appender = Appender(given)
    try:
        stack.source_connect.create(source_name, file_source_config(given, topic))
        stack.source_connect.create(sink_name, {"connector.class": FILE_SINK, "tasks.max": "1", "file": str(on_source),
                                                "topics": topic})
        with mirrored(stack, manifest, spec):
            wait_for_round(manifest, 1, timeout_s=120)
            appender.start()
            wait_until(lambda: len(lines_of(on_source)) >= 200, "the sink writing on the source", 60)
            rows = move_sinks(manifest, stack.source, stack.target, stack.source_connect, stack.target_connect,
                              [sink_name], mirrored=lambda: mirrored_topics(mirror_status.read(manifest) or {}),
                              target_bootstrap=stack.target.bootstrap_servers,
                              overrides={sink_name: {"file": str(on_dr)}}, wait_s=60)
            assert [(r["name"], r["state_now"]) for r in rows] == [(sink_name, "RUNNING")], rows
            assert stack.source_connect.state(sink_name) == "STOPPED"
            assert manifest.read(part(sink_name))["state"] == "moved"
            wait_until(lambda: len(lines_of(on_dr)) >= 200, "the sink writing on the DR cluster", 60)
            row = promote_topics(manifest, stack.source, stack.target, [topic], wait_s=60, connectors=[source_name],
                                 connect=clients)
            assert [(c["name"], c["state_now"]) for c in row["connectors"]] == [(source_name, "RUNNING")], row
            assert stack.source_connect.state(source_name) == "STOPPED"
            written = appender.written
            try:
                wait_until(lambda: len(lines_of(on_source)) + len(lines_of(on_dr)) >= written + 200,
                           "the pipeline going on on the DR cluster", 60)
            except AssertionError as exc:
                raise AssertionError(f"{exc}: {len(lines_of(on_source))} + {len(lines_of(on_dr))} lines of "
                                     f"{appender.written}; {row}; DR: {stack.target_connect.status(source_name)}, "
                                     f"{stack.target_connect.offsets(source_name)}, "
                                     f"{stack.target_connect.status(sink_name)}; DR records "
                                     f"{len(records_of(stack.target, topic, 0))}") from None
            appender.stop()
            wait_until(lambda: len(lines_of(on_source)) + len(lines_of(on_dr)) >= appender.written,
                       "every line through the pipeline", 60)
        lines = given.read_text().splitlines()
        assert lines_of(on_source) + lines_of(on_dr) == lines
        assert [r[2].decode() for r in records_of(stack.target, topic, 0)] == lines
    finally:
        appender.stop()
        delete_connectors(clients, [source_name, sink_name])


def test_a_sink_connector_reading_a_topic_outside_the_mirror_is_refused_before_it_is_stopped(stack, unique_name,
                                                                                            tmp_path):
    topic, outside, name = f"{unique_name}.lines", f"{unique_name}x.other", f"{unique_name}-sink"
    create_topic(stack.source, topic, 1)
    create_topic(stack.source, outside, 1)
    manifest = Manifest(str(tmp_path / "state"), "connectors-refused")
    args = (manifest, stack.source, stack.target, stack.source_connect, stack.target_connect, [name])
    try:
        stack.source_connect.create(name, {"connector.class": FILE_SINK, "tasks.max": "1",
                                           "file": str(tmp_path / "out.txt"), "topics": f"{topic},{outside}"})
        with pytest.raises(ConfigError, match="no mirror status"):
            move_sinks(*args, mirrored=set, target_bootstrap=None)
        with mirrored(stack, manifest, MirrorSpec(re.escape(topic), interval_s=0.5, term_s=60.0)):
            wait_for_round(manifest, 1, timeout_s=120)
            with pytest.raises(ConfigError, match=rf"does not hold: {re.escape(outside)}.*nothing was stopped"):
                move_sinks(*args, mirrored=lambda: mirrored_topics(mirror_status.read(manifest) or {}),
                           target_bootstrap=None)
        assert stack.source_connect.state(name) == "RUNNING" and manifest.read(part(name)) is None
    finally:
        delete_connectors((stack.source_connect, stack.target_connect), [name])
