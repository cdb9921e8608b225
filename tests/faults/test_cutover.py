"""Faults around the cutover on the 3-broker stack: the source's log start moved between the pre-copy
and the cutover, and the target Connect worker SIGKILLed in the middle of the connector migration.
Each ends with a record-by-record comparison (and, for the connector, every record once, in order)."""
from __future__ import annotations

import os
import signal
import time
import uuid

import pytest
from kmigrate.copy.partition import copy_partition
from kmigrate.copy.writer import CopyOptions
from kmigrate.errors import ConnectError, ForeignTarget
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.connect import ConnectClient
from kmigrate.manifest import Manifest
from kmigrate.model import WorkUnit
from kmigrate.run.connectors.migrate import migrate_connectors, resume_connectors, stop_connectors
from kmigrate.run.cutover.snapshot import take_snapshot

from tests.support.connect import FILE_SINK, copy_run, lines_of
from tests.support.faults import MID_FAULT, RECORDS, compare, plain_workload, prepared
from tests.support.kafka import produce
from tests.support.waiting import wait_until


@pytest.mark.parametrize("moved_to", [RECORDS // 3, RECORDS * 5 // 6],
                         ids=["inside-the-pre-copied-range", "past-the-pre-copied-end"])
def test_source_log_start_moved_between_pre_copy_and_cutover(faulty, moved_to):
    """Retention deletes whole segments from the front of the log; DeleteRecords moves the log start the
    same way, at an offset the test chooses."""
    topic = f"fault-log-start-{uuid.uuid4().hex[:6]}"
    faulty.create_topic(topic)
    plain_workload(faulty, topic)
    end = prepared(faulty, topic)
    run = f"faults-{uuid.uuid4().hex[:6]}"
    pre_copied = RECORDS * 2 // 3
    first = copy_partition(faulty.source, faulty.target, WorkUnit(topic, 0, pre_copied), CopyOptions(run_id=run))
    assert first.target_end == pre_copied
    with ClusterAdmin(faulty.source) as source:
        source.delete_records(topic, 0, moved_to)
        assert source.watermarks(topic, 0) == (moved_to, end)
    if moved_to > pre_copied:  # without the run's word for it, records the source no longer has are foreign
        with pytest.raises(ForeignTarget, match="did not write"):
            copy_partition(faulty.source, faulty.target, WorkUnit(topic, 0, end), CopyOptions(run_id=run))
    # the cutover copy, told by the run's manifest where its pre-copy left the target (the copy job does that)
    final = copy_partition(faulty.source, faulty.target, WorkUnit(topic, 0, end), CopyOptions(run_id=run),
                           own_end=first.target_end)
    assert final.digests_equal and final.target_end == end
    with ClusterAdmin(faulty.target) as target:
        assert target.watermarks(topic, 0) == (moved_to, end)
    compare(faulty, topic, 1, f"source log start moved {'inside' if moved_to < pre_copied else 'past'} "
                              "the pre-copied range before the cutover")


class KillsWorkerBeforeOffsets(ConnectClient):
    """The target's Connect client: SIGKILLs the worker the moment the migration is about to write the
    connector's offsets (after creating it STOPPED), once."""

    def __init__(self, url: str, kill) -> None:
        super().__init__(url, request_timeout_s=5)
        self.kill, self.killed = kill, False

    def alter_offsets(self, name, offsets):
        if not self.killed:
            self.killed = True
            self.kill()
        return super().alter_offsets(name, offsets)


def test_target_connect_worker_killed_during_connector_migration(faulty, tmp_path):
    topic, name = f"fault-connect-{uuid.uuid4().hex[:6]}", f"fault-sink-{uuid.uuid4().hex[:6]}"
    values = [f"record {i:03d}" for i in range(150)]
    out_source, out_target = tmp_path / "sink-source.txt", tmp_path / "sink-target.txt"
    source_connect = ConnectClient(faulty.clusters[0].connect_url)
    target_connect = ConnectClient(faulty.clusters[1].connect_url)
    faulty.create_topic(topic)
    produce(faulty.source, topic, [(None, v.encode()) for v in values[:100]])
    source_connect.create(name, {"connector.class": FILE_SINK, "tasks.max": "1", "file": str(out_source),
                                 "topics": topic})
    try:
        wait_until(lambda: len(lines_of(out_source)) == 100 and source_connect.offsets(name) == [
            {"partition": {"kafka_topic": topic, "kafka_partition": 0}, "offset": {"kafka_offset": 100}}],
            "the source sink at offset 100", 60, ignore=MID_FAULT)
        stop_connectors(source_connect, [name])
        produce(faulty.source, topic, [(None, v.encode()) for v in values[100:]])  # arrives while it is stopped
        manifest = Manifest(str(tmp_path / "state"), f"faults-{uuid.uuid4().hex[:6]}")
        take_snapshot(manifest, faulty.source, topics_include=topic, source_connect=source_connect, connectors=[name])
        copy_run(faulty, manifest)
        worker = next(s for s in faulty.module.services(faulty.clusters, faulty.state_dir)
                      if s.kind == "connect" and s.cluster == faulty.clusters[1])

        def kill_worker():
            os.killpg(worker.pid(), signal.SIGKILL)
            faulty.killed.append(worker)
        dying = KillsWorkerBeforeOffsets(faulty.clusters[1].connect_url, kill_worker)
        overrides = {name: {"file": str(out_target)}}
        with pytest.raises(ConnectError):
            migrate_connectors(manifest, dying, overrides=overrides)
        assert dying.killed
        began = time.monotonic()
        faulty.restart_killed()  # the worker comes back: it reads the connector (STOPPED) from its config topic
        # the step's retry: the connector is there with the same config; its offsets are written now
        [result] = migrate_connectors(manifest, target_connect, overrides=overrides)
        assert not result["created"] and result["offsets_written"] and result["state"] == "STOPPED"
        print(f"worker restarted and the step retried in {time.monotonic() - began:.1f} s")
        resume_connectors(target_connect, [name])
        wait_until(lambda: len(lines_of(out_target)) == 50, "the target's sink to write the 50 records after 100", 90,
                   ignore=MID_FAULT)
        assert lines_of(out_source) + lines_of(out_target) == values  # every record exactly once, in order
    finally:
        for client in (source_connect, target_connect):
            try:
                client.delete(name)
            except ConnectError:
                pass
    compare(faulty, topic, 1, "target Connect worker SIGKILLed during connector migration")
