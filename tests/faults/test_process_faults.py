"""Faults of the processes and services around a copy, on the 3-broker stack: a producer quota on
the target (the raw path honours the brokers' throttle times), the Airflow task killed while its
Spark job copies on (the orphan and the task's retry copy the same partitions), the whole source
cluster restarted during a pre-copy round, the source Connect worker restarted while the run stops
its connectors, the claims topic deleted while a run holds topics, and the target's disk full (a
one-broker target on a small tmpfs, root only). Each ends with a record-by-record comparison."""
from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import threading
import time
import types
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from kmigrate import claims
from kmigrate.config import ClusterConfig
from kmigrate.copy.partition import copy_partition
from kmigrate.copy.writer import CopyOptions
from kmigrate.errors import ConnectError, CopyError, ForeignTarget, KmigrateError, OffsetMismatch
from kmigrate.kafka import throttle, wire
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.connect import ConnectClient
from kmigrate.kafka.pool import identity
from kmigrate.manifest import Manifest, Part
from kmigrate.model import WorkUnit
from kmigrate.run.connectors.migrate import restore_states, stop_connectors
from kmigrate.run.copying.plan import build_plan, work_units, write_pre_copy_plan
from kmigrate.run.copying.precopy import pre_copy_rounds
from kmigrate.run.targets.prepare import prepare_target_topic, prepare_targets
from kmigrate.run.copying.tasks import copy_bin
from kmigrate_spark.conf import submit_args

from tests.conftest import PROJECT_DIR, close_pooled_clients
from tests.faults.conftest import compare, wait_for
from tests.integration.test_copier import records_of, seed_plain
from tests.integration.test_offsets import FILE_SINK, lines_of
from tests.integration.test_spark_jobs import SPARK_SUBMIT, make_run
from tests.kafka_helpers import produce
from tests.kill_hook import kill_hook_env

QUOTA_CLIENT = "kmigrate"  # the raw connection's client id (kmigrate.kafka.wire.BrokerConnection)


def set_client_quota(cluster, client_id: str, producer_byte_rate: float | None) -> None:
    """Set (or, with None, remove) the producer byte-rate quota of a client id on every broker of
    `cluster` (AlterClientQuotas v0 over the raw connection: the stack installs no Kafka tools).
    The brokers apply it within a moment of the controller's answer."""
    name = client_id.encode()
    op = wire._string("producer_byte_rate") + struct.pack(">db", producer_byte_rate or 0.0, producer_byte_rate is None)
    body = (struct.pack(">i", 1)  # entries: one
            + struct.pack(">i", 1) + wire._string("client-id") + struct.pack(">h", len(name)) + name
            + struct.pack(">i", 1) + op + b"\x00")  # ops: one; validate_only false
    host, port = cluster.bootstrap_servers.split(",")[0].split(":")
    with wire.BrokerConnection(host, int(port)) as conn:
        conn.send(49, 0, body)  # ALTER_CLIENT_QUOTAS
        _, data = conn.receive()
    # throttle time, entries: [error code, error message, entity]
    (count,) = struct.unpack_from(">i", data, 4)
    (error,) = struct.unpack_from(">h", data, 8)
    assert count == 1 and error == 0, f"AlterClientQuotas refused: {wire.error_name(error)}"


def seeded(stack, prefix: str, partitions: int, per_partition: int, **producer_settings) -> str:
    topic = f"{prefix}-{uuid.uuid4().hex[:6]}"
    seed_plain(stack.source, topic, partitions=partitions, per_partition=per_partition, **producer_settings)
    wait_for(lambda: all(stack.leader("source", topic, p) >= 0 for p in range(partitions)), 30, f"{topic}: leaders")
    return topic


def test_target_producer_quota_is_honoured_and_the_copy_completes(faulty):
    """A producer byte-rate quota on the target for the raw connection's client id: Produce responses
    over it carry a throttle time, which the copier waits out before its next request to that
    broker (KIP-219), and the copy completes, equal. Both raw write paths: a task's partitions
    together (one Produce a leader) and one partition in many requests (small fetches)."""
    # Kafka measures a rate over its whole quota window (11 one-second samples): to be throttled, a
    # copy writes more than rate x 11 s to a broker. Batches of 8 KiB on the source: one Produce a
    # fetch of 16 KiB, so that there is a next request to hold back
    partitions, per_partition, rate = 2, 1500, 16 << 10
    topic = seeded(faulty, "fault-quota", partitions, per_partition, **{"batch.size": 8192})
    units = work_units(build_plan(faulty.source, [topic]))
    clients = (faulty.source, faulty.target)
    prepare_targets(*clients, units)
    run = f"faults-{uuid.uuid4().hex[:6]}"
    set_client_quota(faulty.target, QUOTA_CLIENT, rate)
    try:
        throttle.reset()
        began = time.monotonic()
        rows = copy_bin([(u, {}) for u in units[1:]], clients, run)  # whole partitions, one Produce a leader
        rows.append(copy_partition(*clients, units[0], CopyOptions(run_id=run, fetch_max_bytes=16 << 10)).as_row())
        took = time.monotonic() - began
        seen = throttle.reset()
    finally:
        set_client_quota(faulty.target, QUOTA_CLIENT, None)
    assert all(r["digests_equal"] for r in rows), rows
    print(f"quota {rate} B/s a broker: {sum(r['bytes'] for r in rows)} bytes copied in {took:.1f} s; "
          f"{seen['responses']} throttled responses asked for {seen['ms']} ms, {seen['waited_ms']} ms waited")
    assert seen["responses"] > 0, "the brokers never throttled the copy: the quota was not applied"
    assert seen["waited_ms"] > 0, "the copier never waited for a throttle time"
    compare(faulty, topic, partitions, f"a producer quota on the target ({seen['responses']} throttled Produce "
                                       f"responses, {seen['waited_ms']} ms waited out)")


# What the Airflow task does for its copy job: start spark-submit and wait for it. Its own process
# group, as a task runner's child that outlives it.
TASK = """
import subprocess, sys
with open(sys.argv[1], "w") as out:
    job = subprocess.Popen(sys.argv[2:], start_new_session=True, stdout=out, stderr=subprocess.STDOUT)
print(job.pid, flush=True)
sys.exit(job.wait())
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_task_killed_while_its_spark_job_copies_on_and_the_retry_copies_the_same_partitions(faulty, tmp_path):
    """The Airflow task's process is SIGKILLed while the copy job it launched copies; the job, orphaned,
    copies on. The task's retry submits the same job (same run, same plan). Both write the same target
    partitions: the orphan holds each partition's lease while it copies it, the retry's copiers wait
    for each lease and resume from the target's end, so no partition gets a record twice or at
    another offset. A producer quota on the target makes the orphan slow enough (throttled, many
    small requests) to be still copying when the retry starts."""
    partitions, per_partition = 4, 1000
    topic = seeded(faulty, "fault-orphan", partitions, per_partition, **{"batch.size": 8192})
    run = f"faults-{uuid.uuid4().hex[:6]}"
    manifest, clients = make_run(faulty, tmp_path, [topic], run_id=run)
    # the tests' kill hook set with a count never reached: each partition copied on its own in 16 KiB
    # fetches (not a task's partitions together), many small requests for the quota to hold back
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           **kill_hook_env(10 * per_partition, tmp_path)}
    job = [SPARK_SUBMIT, "--master", "local[2]", *submit_args({"spark.ui.enabled": "false"}),
           str(PROJECT_DIR / "spark_jobs" / "copy_partitions.py"), "--state-location", str(tmp_path / "state"),
           "--run-id", run, "--clients", str(clients)]
    orphan_log = tmp_path / "orphan.log"
    set_client_quota(faulty.target, QUOTA_CLIENT, 8 << 10)
    task = subprocess.Popen([sys.executable, "-c", TASK, str(orphan_log), *job], stdout=subprocess.PIPE, text=True,
                            env=env, cwd=PROJECT_DIR)
    orphan = int(task.stdout.readline())
    try:
        def copying() -> bool:
            with ClusterAdmin(faulty.target) as target:
                return sum(target.watermarks(topic, p)[1] for p in range(partitions)) > 0
        wait_for(copying, 180, "the copy job to write to the target")
        task.send_signal(signal.SIGKILL)  # the Airflow task's process dies; its Spark job does not
        task.wait(30)
        assert alive(orphan), "the copy job ended with its task: nothing is orphaned"
        with ClusterAdmin(faulty.target) as target:
            at_retry = sum(target.watermarks(topic, p)[1] for p in range(partitions))
        retry = subprocess.run(job, capture_output=True, text=True, timeout=600, env=env, cwd=PROJECT_DIR)
        held = 0
        if retry.returncode != 0:
            # the orphan held a partition longer than the retry waits for it (two leases): the retry fails
            # naming it, writing nothing there; the task's next retry, once the orphan has ended, resumes
            out = retry.stdout + retry.stderr
            assert retry.returncode == 1 and "another copier holds the target partition" in out, out[-4000:]
            assert f"(run {run!r}, host " in out, out[-4000:]
            held = out.count("another copier holds the target partition")
            wait_for(lambda: not alive(orphan), 300, "the orphaned copy job to end")
            retry = subprocess.run(job, capture_output=True, text=True, timeout=600, env=env, cwd=PROJECT_DIR)
            assert retry.returncode == 0, (retry.stdout + retry.stderr)[-4000:]
        wait_for(lambda: not alive(orphan), 300, "the orphaned copy job to end")
        orphan_out = orphan_log.read_text()
        assert f"{partitions} partitions copied" in orphan_out, orphan_out[-4000:]
    finally:
        set_client_quota(faulty.target, QUOTA_CLIENT, None)
        if alive(orphan):
            os.killpg(orphan, signal.SIGKILL)
    # each partition's records were written once: by the orphan, or what it had not written by the retry
    attempts = [manifest.read(p)["rows"] for p in manifest.parts() if p.startswith("copy-results/")]
    assert len(attempts) == 2 + (held > 0), attempts
    for partition in range(partitions):
        rows = [r for rows in attempts for r in rows if r["partition"] == partition and r["ok"]]
        assert sum(r["records"] for r in rows) == per_partition, rows
    written = [sum(r["records"] for r in rows if r["ok"]) for rows in attempts]  # by each job, in order of ending
    refused, holders = lease_contention(faulty, topic)
    print(f"{at_retry} records on the target when the task died; the jobs wrote {written} records, in order of "
          f"ending; {refused} lease claims refused while another copier held the "
          f"partition, {holders} copier processes claimed leases; {held} partitions failed the first retry as held")
    assert refused > 0, "the retry never found a partition leased by the orphan: the two did not overlap"
    compare(faulty, topic, partitions, f"the Airflow task killed, its Spark job copying on while the retry's job "
                                       f"copies the same partitions ({refused} lease claims refused, {held} held "
                                       f"partitions failed a retry; records written by each job {written})")


def lease_contention(stack, topic: str) -> tuple[int, int]:
    """The claims log read as every copier reads it: (lease claims on the topic's partitions that did
    not take effect because another copier held the partition, processes that claimed them)."""
    state, refused, pids = claims.Claims(), 0, set()
    for _offset, _key, value, _headers, ts in records_of(stack.target, claims.CLAIMS_TOPIC, 0):
        record = json.loads(value) if value else {}
        took = state.apply(ts, record)
        if record.get("kind") == "lease" and str(record.get("scope", "")).startswith(f"{topic}:"):
            pids.add((record.get("host"), record.get("pid")))
            refused += not took
    return refused, len(pids)


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
            wait_for(lambda n=name: len(lines_of(outputs[n])) == 100 and source_connect.offsets(n) == [
                {"partition": {"kafka_topic": topic, "kafka_partition": 0}, "offset": {"kafka_offset": 100}}],
                90, f"{name} at offset 100")
        run = f"faults-{uuid.uuid4().hex[:6]}"
        manifest = Manifest(str(tmp_path / "state"), run)
        dying = KillsWorkerAfterFirst(url, kill_worker, "stop")
        with pytest.raises(ConnectError) as failed:
            stop_connectors(dying, names, manifest)
        assert dying.killed
        print(f"the stop step failed: {failed.value}")
        faulty.restart_killed()  # the worker comes back, reading the first connector's stop from its config topic
        wait_for(lambda: source_connect.connectors() is not None, 120, "the source Connect worker to answer")
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
        wait_for(lambda: source_connect.connectors() is not None, 120, "the source Connect worker to answer")
        restored = restore_states(source_connect, states)  # the rollback's retry
        assert [r["state"] for r in restored] == ["RUNNING", "RUNNING"], restored
        for name in names:
            wait_for(lambda n=name: len(lines_of(outputs[n])) >= 150, 90, f"{name} to write the 50 records after 100")
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


SECOND_RUN = """
import json, sys, time
from kmigrate import claims
from kmigrate.config import ClusterConfig
from kmigrate.copy.partition import copy_partition
from kmigrate.copy.writer import CopyOptions
from kmigrate.model import WorkUnit
source, target, topic, end, run, action = sys.argv[1:7]
source, target = ClusterConfig.from_bootstrap("source", source), ClusterConfig.from_bootstrap("target", target)
claims.claim_topics(target, run, [topic])
if action == "copy":
    began = time.monotonic()
    result = copy_partition(source, target, WorkUnit(topic, 0, int(end)),
                            CopyOptions(run_id=run, fetch_max_bytes=16 << 10))
    print(json.dumps({**result.as_row(), "took": time.monotonic() - began}))
"""


def second_run(stack, topic: str, end: int, run: str, action: str) -> subprocess.CompletedProcess:
    """Another run's process (a claim log of its own): claim the topic, and copy it with "copy"."""
    return subprocess.run([sys.executable, "-c", SECOND_RUN, stack.source.bootstrap_servers,
                           stack.target.bootstrap_servers, topic, str(end), run, action],
                          cwd=PROJECT_DIR, capture_output=True, text=True, timeout=300)


def test_claims_topic_deleted_while_a_run_copies_and_a_second_run_claims_its_topics(faulty):
    """kmigrate-claims deleted on the target while run A copies a topic it holds; run B, started
    then, creates the claims topic anew and claims the topic (A's claim went with the topic: a
    limit, DESIGN.md §4.7), then copies it. The writes stay one at a time: A cannot renew its lease
    (its claims are gone) and stops writing within half a lease; a new claims log grants no lease
    for its first lease_s, so B writes only after that, resuming from the target's end. A fails
    naming the claims topic; A's retry is refused naming B. The target equals the source."""
    per_partition = 1500
    topic = seeded(faulty, "fault-claims-deleted", 1, per_partition, **{"batch.size": 8192})
    first, second = f"first-{uuid.uuid4().hex[:6]}", f"second-{uuid.uuid4().hex[:6]}"
    units = work_units(build_plan(faulty.source, [topic]))
    prepare_targets(faulty.source, faulty.target, units)
    claims.claim_topics(faulty.target, first, [topic])
    outcome: dict = {}

    def copy() -> None:
        try:
            outcome["result"] = copy_partition(faulty.source, faulty.target, units[0],
                                               CopyOptions(run_id=first, fetch_max_bytes=16 << 10, retry_for_s=30))
        except KmigrateError as exc:
            outcome["error"] = exc

    set_client_quota(faulty.target, QUOTA_CLIENT, 8 << 10)  # A copies slowly: still copying when B comes
    thread = threading.Thread(target=copy, daemon=True)
    try:
        thread.start()

        def copied() -> int:
            with ClusterAdmin(faulty.target) as target:
                return target.watermarks(topic, 0)[1]
        wait_for(lambda: copied() > per_partition // 10, 120, "run A to copy")
        admin = AdminClient(faulty.target.admin())
        admin.delete_topics([claims.CLAIMS_TOPIC], operation_timeout=30)[claims.CLAIMS_TOPIC].result(60)
        deleted_at, at_delete = time.monotonic(), copied()
        wait_for(lambda: claims.CLAIMS_TOPIC not in admin.list_topics(timeout=10).topics, 60, "the claims topic gone")
        b = second_run(faulty, topic, per_partition, second, "copy")  # claims anew, then waits for the lease
        b_done = time.monotonic()
        thread.join(300)
        assert not thread.is_alive(), "run A's copy did not end"
    finally:
        set_client_quota(faulty.target, QUOTA_CLIENT, None)
    assert b.returncode == 0, (b.stdout + b.stderr)[-4000:]
    b_row = json.loads(b.stdout.strip().splitlines()[-1])
    a_error = outcome.get("error")
    print(f"claims topic deleted with {at_delete} records copied by A; A: "
          f"{'ended: ' + str(a_error)[:300] if a_error else 'completed'}; B copied {b_row['records']} records from "
          f"offset {b_row['target_start']} in {b_row['took']:.1f} s, ending {b_done - deleted_at:.1f} s after the deletion")
    assert not isinstance(a_error, (OffsetMismatch, ForeignTarget)), a_error  # never a record at another offset
    assert b_row["digests_equal"] and b_row["target_start"] + b_row["records"] == per_partition
    # A's retry (a process of its own, as a retried task): refused, naming B, before it writes
    again = second_run(faulty, topic, per_partition, first, "claim")
    assert again.returncode != 0 and f"run {second!r}" in again.stderr and "holds" in again.stderr, again.stderr[-3000:]
    claims.close_all()  # this process's claim log read the deleted topic: read the new one from its start
    assert claims.release_topics(faulty.target, second)
    compare(faulty, topic, 1, "kmigrate-claims deleted while a run copies; a second run claims its topic and copies "
                              f"only after a lease (run A {'failed clearly' if a_error else 'completed'}, B resumed "
                              f"at {b_row['target_start']})")


def test_a_claims_log_younger_than_a_lease_grants_none():
    """The rule behind the test above, as every reader folds it: from the log's first record (offset
    0) on, for a lease's length, a lease takes effect only on a target partition its claimant found
    empty or one already leased in this log; then the usual rule."""
    state = claims.Claims()
    state.born = 1_000
    lease = {"kind": "lease", "scope": "t:0", "run": "b", "lease_ms": 30_000}
    assert state.apply(1_000, {"kind": "run", "run": "b", "topics": ["t"]})  # runs' claims are not held back
    assert not state.apply(2_000, {**lease, "holder": "x"})
    assert not state.apply(30_999, {**lease, "holder": "y"})
    assert state.apply(31_000, {**lease, "holder": "y"})
    assert not state.apply(31_001, {**lease, "holder": "x"})  # then held as any lease is
    # a target partition its claimant found empty has no writer to wait for (a new target's first copy),
    # and a partition leased once in this log is known to it from then on (a round's next copy)
    assert state.apply(2_000, {**lease, "scope": "t:1", "holder": "z", "target_empty": True})
    assert state.apply(2_500, {"kind": "lease-release", "scope": "t:1", "holder": "z"})
    assert state.apply(3_000, {**lease, "scope": "t:1", "holder": "w"})
    assert not state.apply(3_000, {**lease, "scope": "t:2", "holder": "w", "target_empty": False})


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
        claims._logs[identity(config)] = claims.ClaimLog(config, timeout_s=5)
        yield types.SimpleNamespace(config=config, data=data, start=start, launched=launched, module=module,
                                    service=service)
    finally:
        tiny_log = claims._logs.pop(identity(ClusterConfig.from_bootstrap("target", cluster.bootstrap)), None)
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
