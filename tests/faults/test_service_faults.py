"""Faults of the services around a copy, on the 3-broker stack: the whole source cluster restarted
during a pre-copy round, the source Connect worker restarted while the run stops its connectors and
while it rolls back, and the target's disk full (a one-broker target on a small tmpfs, root only).
Each ends with a record-by-record comparison. The processes that write: test_process_faults.py."""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import types
import uuid

import pytest
from confluent_kafka import Producer
from kmigrate.claims import log as claims_log
from kmigrate.config import ClusterConfig
from kmigrate.copy.partition import copy_partition
from kmigrate.copy.writer import CopyOptions
from kmigrate.errors import ConnectError, CopyError, KmigrateError
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.connect import ConnectClient
from kmigrate.kafka.pool import identity
from kmigrate.manifest import Manifest, Part
from kmigrate.model import WorkUnit
from kmigrate.run.connectors.migrate import restore_states, stop_connectors
from kmigrate.run.copying.plan import work_units, write_pre_copy_plan
from kmigrate.run.copying.precopy import pre_copy_rounds
from kmigrate.run.targets.prepare import prepare_target_topic, prepare_targets
from kmigrate.run.copying.tasks import copy_bin

from tests.support.connect import FILE_SINK, lines_of
from tests.support.faults import MID_FAULT, compare, seeded
from tests.support.kafka import produce
from tests.support.stack import close_pooled_clients
from tests.support.waiting import wait_until


def test_whole_source_cluster_restarted_during_a_pre_copy_round(faulty, tmp_path):
    """All three source brokers stopped (together, as `stack down` stops them) in the middle of a
    pre-copy round's copy of a partition, and started again while the round goes on: the round's
    copies resume once the source answers again (or the round fails, and the step's retry resumes);
    the run then ends equal."""
    partitions, per_partition = 3, 2000
    topic = seeded(faulty, "fault-source-restart", partitions, per_partition, **{"batch.size": 8192})
    clients, run = (faulty.source, faulty.target), f"faults-{uuid.uuid4().hex[:6]}"
    manifest = Manifest(str(tmp_path / "state"), run)
    units = work_units(write_pre_copy_plan(manifest, faulty.source, [topic], {}))
    prepare_targets(*clients, units, manifest=manifest)
    brokers = [faulty.broker("source", node) for node in faulty.clusters[0].nodes]
    restart: dict = {}

    def start_again() -> None:
        faulty.module.up(faulty.clusters, faulty.state_dir, timeout_s=180)
        restart["up"] = time.monotonic()

    def restart_source(records: int) -> None:
        """Called by the copy of partition 0 with its progress: once, stop the whole source cluster and
        start it again in the background (the copy goes on meanwhile, against a cluster that is down)."""
        if "stopped" in restart or records < per_partition // 4:
            return
        restart["at_records"] = records
        stopped = faulty.module.stop_all(brokers)
        assert len(stopped) == len(brokers) and all(b.pid() is None for b in brokers)
        restart["stopped"] = time.monotonic()
        restart["thread"] = threading.Thread(target=start_again, daemon=True)
        restart["thread"].start()

    def copy_round(round_units):
        """A round as the copy job's tasks run it (copy_task's rows), each partition copied on its own
        in small fetches; partition 0 reports its progress to the fault."""
        rows = []
        for unit in round_units:
            options = CopyOptions(run_id=run, fetch_max_bytes=16 << 10, verify=False, live=True,
                                  progress_hook=restart_source if unit.partition == 0 else None)
            try:
                rows.append({"ok": True, **copy_partition(*clients, unit, options).as_row()})
            except KmigrateError as exc:
                rows.append({"ok": False, "topic": unit.topic, "partition": unit.partition, "error": str(exc)})
        manifest.write_once(Part.attempt(Part.COPY_RESULTS), {"rows": rows, "seconds": 0.0, "warm_up_seconds": 0.0})
        return rows

    try:
        began = time.monotonic()
        units, failed = pre_copy_rounds(manifest, faulty.source, units, copy_round, max_rounds=1,
                                        converged_records=0, say=print)
        round_s = time.monotonic() - began
        assert "stopped" in restart, "the source cluster was not restarted during the round"
        restart["thread"].join(240)
        assert "up" in restart, "the source cluster did not come back"
        retried = bool(failed)
        if failed:  # the step's retry: a round again, resuming from the target's end
            print(f"the round failed: {failed}")
            units, failed = pre_copy_rounds(manifest, faulty.source, units, copy_round, max_rounds=1,
                                            converged_records=0, say=print)
            assert not failed, failed
    finally:
        if "thread" in restart:
            restart["thread"].join(240)
        faulty.restart_killed()
    down_s = restart["up"] - restart["stopped"]
    print(f"source cluster stopped after {restart['at_records']} records of partition 0, down and back in "
          f"{down_s:.1f} s; the round took {round_s:.1f} s; {'failed and was retried' if retried else 'completed'}")
    # the cutover's copy: up to the source's ends, verified
    final = copy_bin([(u, {}) for u in units], clients, run, verify=True)
    assert all(r["ok"] and r["digests_equal"] and r["records"] == 0 for r in final), final
    compare(faulty, topic, partitions, "the whole source cluster stopped and started during a pre-copy round "
                                       f"(down {down_s:.0f} s after {restart['at_records']} records; "
                                       + ("the round failed, its retry resumed)" if retried else
                                          "the round's copies resumed once it was back)"))


class KillsWorkerAfterFirst(ConnectClient):
    """The source's Connect client: SIGKILLs the worker right after the first `stop` (or `resume`) it
    sends, once; the step's next requests find no worker."""

    def __init__(self, url: str, kill, method: str) -> None:
        super().__init__(url, request_timeout_s=5)
        self.kill, self.method, self.killed = kill, method, False

    def _after(self, method: str) -> None:
        if method == self.method and not self.killed:
            self.killed = True
            self.kill()

    def stop(self, name, **kwargs):
        super().stop(name, **kwargs)
        self._after("stop")

    def resume(self, name):
        super().resume(name)
        self._after("resume")


def test_source_connect_worker_killed_while_the_run_stops_connectors_and_while_it_rolls_back(faulty, tmp_path):
    """The source Connect worker SIGKILLed after the stop step asked the first of two connectors to
    stop: the step fails naming the worker; once the worker is back the step's retry stops both and
    keeps the states its first attempt recorded. The same in the rollback (after the first resume):
    its retry brings both back RUNNING. The sinks then write every record exactly once, in order."""
    topic = f"fault-src-connect-{uuid.uuid4().hex[:6]}"
    names = [f"fault-sink-{i}-{uuid.uuid4().hex[:6]}" for i in range(2)]
    values = [f"record {i:03d}" for i in range(150)]
    outputs = {name: tmp_path / f"{name}.txt" for name in names}
    url = faulty.clusters[0].connect_url
    source_connect = ConnectClient(url)
    faulty.create_topic(topic)
    produce(faulty.source, topic, [(None, v.encode()) for v in values[:100]])
    worker = next(s for s in faulty.module.services(faulty.clusters, faulty.state_dir)
                  if s.kind == "connect" and s.cluster == faulty.clusters[0])

    def kill_worker() -> None:
        os.killpg(worker.pid(), signal.SIGKILL)
        faulty.killed.append(worker)

    for name in names:
        source_connect.create(name, {"connector.class": FILE_SINK, "tasks.max": "1", "file": str(outputs[name]),
                                     "topics": topic})
    try:
        for name in names:  # each sink has written and committed the first 100 records
            wait_until(lambda n=name: len(lines_of(outputs[n])) == 100 and source_connect.offsets(n) == [
                {"partition": {"kafka_topic": topic, "kafka_partition": 0}, "offset": {"kafka_offset": 100}}],
                f"{name} at offset 100", 90, ignore=MID_FAULT)
        run = f"faults-{uuid.uuid4().hex[:6]}"
        manifest = Manifest(str(tmp_path / "state"), run)
        dying = KillsWorkerAfterFirst(url, kill_worker, "stop")
        with pytest.raises(ConnectError) as failed:
            stop_connectors(dying, names, manifest)
        assert dying.killed
        print(f"the stop step failed: {failed.value}")
        faulty.restart_killed()  # the worker comes back, reading the first connector's stop from its config topic
        wait_until(lambda: source_connect.connectors() is not None, "the source Connect worker to answer", 120,
                   ignore=MID_FAULT)
        states = stop_connectors(source_connect, names, manifest)  # the step's retry
        assert states == dict.fromkeys(names, "RUNNING"), states  # what the first attempt saw, kept
        assert all(source_connect.state(name) == "STOPPED" for name in names)
        produce(faulty.source, topic, [(None, v.encode()) for v in values[100:]])  # written while they are stopped
        with ClusterAdmin(faulty.source) as source, ClusterAdmin(faulty.target) as target:
            prepare_target_topic(source, target, topic)
        copy_partition(faulty.source, faulty.target, WorkUnit(topic, 0, len(values)),
                       CopyOptions(run_id=run))
        # the rollback: the connectors back to their states on the source, the worker killed after the first resume
        dying = KillsWorkerAfterFirst(url, kill_worker, "resume")
        with pytest.raises(ConnectError):
            restore_states(dying, states, wait_s=30)
        assert dying.killed
        faulty.restart_killed()
        wait_until(lambda: source_connect.connectors() is not None, "the source Connect worker to answer", 120,
                   ignore=MID_FAULT)
        restored = restore_states(source_connect, states)  # the rollback's retry
        assert [r["state"] for r in restored] == ["RUNNING", "RUNNING"], restored
        for name in names:
            wait_until(lambda n=name: len(lines_of(outputs[n])) >= 150, f"{name} to write the 50 records after 100", 90,
                       ignore=MID_FAULT)
            assert lines_of(outputs[name]) == values  # every record exactly once, in order
    finally:
        faulty.restart_killed()
        for name in names:
            try:
                source_connect.delete(name)
            except ConnectError:
                pass
    compare(faulty, topic, 1, "the source Connect worker SIGKILLed during stop_connectors and during the rollback "
                              "(each step retried: connectors stopped, then RUNNING again, every record once)")


@pytest.fixture
def tiny_target(faulty, tmp_path):
    """A one-broker target cluster whose log dir is an 8 MiB tmpfs (mounted here: needs root), started
    by this fixture and stopped again by pid, the tmpfs unmounted."""
    if os.geteuid() != 0:
        pytest.skip("a tmpfs log dir needs root (mount)")
    module = faulty.module
    cluster = module.Cluster("diskfull", 29592, 29593, 28593)
    service = module.Service(module.broker_name(cluster, 1), "kafka", cluster, tmp_path / "diskfull")
    data = service.dir / "data"
    data.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(data)], capture_output=True,
                             text=True)
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.strip()}")
    java, launched = module.check_java(), []

    def start() -> None:
        process = module.launch(java, service)
        launched.append(process)
        module.wait_until_answering([service], {service.name: process}, 120)

    try:
        start()
        config = ClusterConfig.from_bootstrap("target", cluster.bootstrap)
        # this cluster's claims log answers within 5 s (not 30): the broker dies of its full disk, and
        # every lease renewal and claim of a copy's retries would wait the full timeout
        claims_log._logs[identity(config)] = claims_log.ClaimLog(config, timeout_s=5)
        yield types.SimpleNamespace(config=config, data=data, start=start, launched=launched, module=module,
                                    service=service)
    finally:
        tiny_log = claims_log._logs.pop(identity(ClusterConfig.from_bootstrap("target", cluster.bootstrap)), None)
        if tiny_log is not None:
            tiny_log.close()
        close_pooled_clients()  # the pooled clients of this cluster would otherwise call it for the rest of the session
        for process in launched:
            if process.poll() is None:
                module.stop(service, pid=process.pid)
        subprocess.run(["umount", str(data)], check=False)


def test_target_disk_full_fails_the_copy_naming_it_and_a_retry_completes_once_space_is_freed(faulty, tiny_target):
    """The target broker's log dir fills up in the middle of a copy: the write is refused with
    KAFKA_STORAGE_ERROR and the broker, its only log dir failed, shuts down; the copy gives up after
    retry_for_s naming the storage error. With space freed (the tmpfs grown) and the broker started
    again, the retry resumes from the target's end and completes equal."""
    topic, records = f"fault-disk-full-{uuid.uuid4().hex[:6]}", 10_000
    faulty.create_topic(topic)
    producer = Producer(faulty.source.producer(**{"linger.ms": 20, "acks": "all", "compression.type": "none"}))
    for i in range(records):  # 10 MB that does not compress, for an 8 MiB disk
        producer.produce(topic, key=b"k%d" % i, value=os.urandom(1000), partition=0)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    target = tiny_target.config
    with ClusterAdmin(faulty.source) as source, ClusterAdmin(target) as admin:
        prepare_target_topic(source, admin, topic)
    unit, run = WorkUnit(topic, 0, records), f"faults-{uuid.uuid4().hex[:6]}"
    began = time.monotonic()
    with pytest.raises(CopyError) as failed:
        copy_partition(faulty.source, target, unit, CopyOptions(run_id=run, retry_for_s=10))
    gave_up_s = time.monotonic() - began
    assert "KAFKA_STORAGE_ERROR" in str(failed.value), failed.value
    assert all(p.poll() is not None for p in tiny_target.launched), "the broker with the full disk still runs"
    subprocess.run(["mount", "-o", "remount,size=64m", str(tiny_target.data)], check=True)  # space freed
    tiny_target.start()
    with ClusterAdmin(target) as admin:
        _, written = admin.watermarks(topic, 0)
    assert 0 < written < records
    result = copy_partition(faulty.source, target, unit, CopyOptions(run_id=run))
    assert result.digests_equal and result.target_start == written and result.records == records - written
    print(f"disk full after {written} of {records} records; the copy gave up in {gave_up_s:.0f} s: "
          f"{str(failed.value)[:400]}")
    compare(types.SimpleNamespace(source=faulty.source, target=target), topic, 1,
            f"the target's disk full mid-copy (KAFKA_STORAGE_ERROR, the broker down, the copy gave up naming it; "
            f"with space freed the retry resumed at {written})")
