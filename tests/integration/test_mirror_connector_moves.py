"""A Connect pipeline moved onto the DR cluster while the mirror runs (kmigrate.run.mirror.connector_moves),
on the real stack, the mirror's driver in this process: a FileStreamSource reads a file that grows
all along into a topic, a FileStreamSink writes the topic to a file. The sink moves first (with the
consumers): stopped on the source, placed on the DR Connect cluster with its offsets, it writes a
file of its own there from where it stopped. Then the source moves with the producers: stopped on the
source, its topic promoted, placed on the DR Connect cluster with its offsets, it goes on reading the
file where it stopped. Every line of the input ends in the two sink files once, in order, and on the
DR topic once, in order."""
from __future__ import annotations

import contextlib
import re
import threading
import types

import pytest
from kmigrate.errors import ConfigError, ConnectUnreachable
from kmigrate.manifest import Manifest
from kmigrate.renames import Renames
from kmigrate.run.mirror import connector_moves
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror.connector_moves import move_sinks, part
from kmigrate.run.mirror.producer_moves import promote_topics
from kmigrate.run.mirror.spec import MirrorSpec

from tests.support.connect import FILE_SINK, delete_connectors, file_source_config, lines_of
from tests.support.kafka import create_topic, records_of
from tests.support.mirror import mirrored, wait_for_round
from tests.support.steps import failing_in_turn
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
        if self.is_alive():
            self.join(10)


@contextlib.contextmanager
def running_pipeline(stack, unique_name: str, tmp_path, run: str, renames: Renames = Renames()):  # noqa: ANN001
    """A FileStreamSource from a growing file into a topic and a FileStreamSink from it, on the source
    Connect cluster, the topic mirrored (under its name in `renames` on the DR cluster), the sink
    writing; the connectors deleted on both sides after."""
    topic = f"{unique_name}.lines"
    p = types.SimpleNamespace(topic=topic, dr_topic=renames.topic(topic), source=f"{unique_name}-src", sink=f"{unique_name}-sink",
                              given=tmp_path / "in.txt", outputs=(tmp_path / "out-source.txt", tmp_path / "out-dr.txt"),
                              manifest=Manifest(str(tmp_path / "state"), run), appender=Appender(tmp_path / "in.txt"),
                              clients=(stack.source_connect, stack.target_connect))
    create_topic(stack.source, topic, 1)
    p.given.touch()
    try:
        stack.source_connect.create(p.source, file_source_config(p.given, topic))
        stack.source_connect.create(p.sink, {"connector.class": FILE_SINK, "tasks.max": "1",
                                             "file": str(p.outputs[0]), "topics": topic})
        with mirrored(stack, p.manifest, MirrorSpec(re.escape(topic), interval_s=0.5, verify_every_s=2.0, term_s=60.0,
                                                    renames=renames)):
            wait_for_round(p.manifest, 1, timeout_s=120)
            p.appender.start()
            wait_until(lambda: len(lines_of(p.outputs[0])) >= 200, "the sink writing on the source", 60)
            yield p
    finally:
        p.appender.stop()
        delete_connectors(p.clients, [p.source, p.sink])


def _move_sink(stack, p) -> list:  # noqa: ANN001
    return move_sinks(p.manifest, stack.source, stack.target, *p.clients, [p.sink],
                      mirrored=lambda: mirror_status.mirrored_topics(mirror_status.read(p.manifest) or {}),
                      target_bootstrap=stack.target.bootstrap_servers, overrides={p.sink: {"file": str(p.outputs[1])}},
                      wait_s=60)


def _move_source(stack, p) -> dict:  # noqa: ANN001
    return promote_topics(p.manifest, stack.source, stack.target, [p.topic], wait_s=60, connectors=[p.source],
                          connect=p.clients)


@pytest.mark.parametrize("renames", [Renames(), Renames(topic_prefix="dr.")], ids=["names kept", "renamed"])
def test_a_connect_pipeline_moved_sink_first_then_source_loses_and_repeats_no_line(stack, unique_name, tmp_path,
                                                                                   renames):
    """Renamed: the mirror keeps the topic under another name on the DR cluster; both connectors go
    on there on that name."""
    with running_pipeline(stack, unique_name, tmp_path, "connectors", renames) as p:
        rows = _move_sink(stack, p)
        assert [(r["name"], r["state_now"]) for r in rows] == [(p.sink, "RUNNING")], rows
        assert stack.source_connect.state(p.sink) == "STOPPED"
        assert p.manifest.read(part(p.sink))["state"] == "moved"
        wait_until(lambda: len(lines_of(p.outputs[1])) >= 200, "the sink writing on the DR cluster", 60)
        row = _move_source(stack, p)
        assert [(c["name"], c["state_now"]) for c in row["connectors"]] == [(p.source, "RUNNING")], row
        assert stack.source_connect.state(p.source) == "STOPPED"
        assert stack.target_connect.config(p.sink)["topics"] == stack.target_connect.config(p.source)["topic"] == p.dr_topic
        _every_line_once_through(stack, p)


SINK_STEPS = ["_topics_read", "stop_on_source", "wait_held", "place_stopped", "restore_states"]
SOURCE_STEPS = ["stop_on_source", "place_stopped", "restore_states"]


def test_a_pipeline_whose_moves_fail_at_each_step_in_turn_loses_and_repeats_no_line(stack, unique_name, tmp_path,
                                                                                    monkeypatch):
    """The sink's move, then the source's with its topic's promotion, each attempt failing at the next
    step (the last ones with the connector placed STOPPED on the DR Connect cluster, not yet in its
    state); the attempt after goes on from where it stood."""
    with running_pipeline(stack, unique_name, tmp_path, "connectors-retried") as p:
        rows, failed = failing_in_turn(monkeypatch, connector_moves, SINK_STEPS, ConnectUnreachable,
                                       lambda: _move_sink(stack, p))
        assert [(r["name"], r["state_now"]) for r in rows] == [(p.sink, "RUNNING")], rows
        assert p.manifest.read(part(p.sink))["state"] == "moved" and failed == SINK_STEPS
        wait_until(lambda: len(lines_of(p.outputs[1])) >= 200, "the sink writing on the DR cluster", 60)
        row, failed = failing_in_turn(monkeypatch, connector_moves, SOURCE_STEPS, ConnectUnreachable,
                                      lambda: _move_source(stack, p))
        assert stack.target_connect.state(p.source) == "RUNNING", row
        assert stack.source_connect.state(p.source) == "STOPPED" and failed == SOURCE_STEPS
        _every_line_once_through(stack, p)


def _every_line_once_through(stack, p) -> None:  # noqa: ANN001
    """The pipeline, on the DR cluster now, goes on; once the appender stopped, every line it wrote is
    in the sink files (on the source's, then the DR cluster's) once, in order, and on the DR topic."""
    written = p.appender.written
    count = lambda: sum(len(lines_of(path)) for path in p.outputs)  # noqa: E731
    try:
        wait_until(lambda: count() >= written + 200, "the pipeline going on on the DR cluster", 60)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {count()} lines of {p.appender.written}; DR: "
                             f"{[stack.target_connect.status(n) for n in (p.source, p.sink)]}; DR records "
                             f"{len(records_of(stack.target, p.dr_topic, 0))}") from None
    p.appender.stop()
    wait_until(lambda: count() >= p.appender.written, "every line through the pipeline", 60)
    lines = p.given.read_text().splitlines()
    assert [line for path in p.outputs for line in lines_of(path)] == lines
    assert [r[2].decode() for r in records_of(stack.target, p.dr_topic, 0)] == lines


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
                move_sinks(*args, mirrored=lambda: mirror_status.mirrored_topics(mirror_status.read(manifest) or {}),
                           target_bootstrap=None)
        assert stack.source_connect.state(name) == "RUNNING" and manifest.read(part(name)) is None
    finally:
        delete_connectors((stack.source_connect, stack.target_connect), [name])

