"""Faults of the processes that write to the target, on the 3-broker stack: a producer quota on the
target (the raw path honours the brokers' throttle times), the Airflow task killed while its Spark job
copies on (the orphan and the task's retry copy the same partitions), and the claims topic deleted
while a run holds topics (a second run claims them; the writes stay one at a time). Each ends with a
record-by-record comparison. Restarted and failing services: test_service_faults.py."""
from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import threading
import time
import uuid

from confluent_kafka.admin import AdminClient
from kmigrate.claims.log import CLAIMS_TOPIC, close_all
from kmigrate.claims.runs import claim_topics, release_topics
from kmigrate.claims.state import Claims
from kmigrate.copy.partition import copy_partition
from kmigrate.copy.writer import CopyOptions
from kmigrate.errors import ForeignTarget, KmigrateError, OffsetMismatch
from kmigrate.kafka import throttle, wire
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.run.copying.plan import build_plan, work_units
from kmigrate.run.targets.prepare import prepare_targets
from kmigrate.run.copying.tasks import copy_bin
from kmigrate_spark.conf import submit_args

from tests.support.faults import MID_FAULT, compare, seeded
from tests.support.kafka import records_of
from tests.support.kill_hook import kill_hook_env
from tests.support.spark import SPARK_SUBMIT, job_arguments, make_run
from tests.support.stack import PROJECT_DIR
from tests.support.waiting import wait_until

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
        rows = copy_bin([(u, {}) for u in units[1:]], clients, run)  # copied together, one Produce a leader
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
    small requests) to be still copying when the retry starts: the quota holds the orphan back until
    the retry has found a partition it leases, and is lifted then."""
    partitions, per_partition = 4, 1000
    topic = seeded(faulty, "fault-orphan", partitions, per_partition, **{"batch.size": 8192})
    run = f"faults-{uuid.uuid4().hex[:6]}"
    manifest, clients = make_run(faulty, tmp_path, [topic], run_id=run)
    # the tests' kill hook set with a count never reached: each partition copied on its own in 16 KiB
    # fetches (not a task's partitions together), many small requests for the quota to hold back
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           **kill_hook_env(10 * per_partition, tmp_path)}
    job = [SPARK_SUBMIT, "--master", "local[2]", *submit_args({"spark.ui.enabled": "false"}),
           *job_arguments("copy_partitions", tmp_path / "state", run, clients)]
    orphan_log = tmp_path / "orphan.log"
    set_client_quota(faulty.target, QUOTA_CLIENT, 2 << 10)
    task = subprocess.Popen([sys.executable, "-c", TASK, str(orphan_log), *job], stdout=subprocess.PIPE, text=True,
                            env=env, cwd=PROJECT_DIR)
    orphan, started = int(task.stdout.readline()), None
    try:
        def copying() -> bool:
            with ClusterAdmin(faulty.target) as target:
                return sum(target.watermarks(topic, p)[1] for p in range(partitions)) > 0
        wait_until(copying, "the copy job to write to the target", 180, ignore=MID_FAULT)
        task.send_signal(signal.SIGKILL)  # the Airflow task's process dies; its Spark job does not
        task.wait(30)
        assert alive(orphan), "the copy job ended with its task: nothing is orphaned"
        with ClusterAdmin(faulty.target) as target:
            at_retry = sum(target.watermarks(topic, p)[1] for p in range(partitions))
        started = subprocess.Popen(job, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                   cwd=PROJECT_DIR)
        wait_until(lambda: lease_contention(faulty, topic)[0] > 0 or started.poll() is not None,
                   "the retry to find a partition the orphan leases", 300, ignore=MID_FAULT)
        set_client_quota(faulty.target, QUOTA_CLIENT, None)  # the orphan may finish now
        out, err = started.communicate(timeout=600)
        retry = subprocess.CompletedProcess(job, started.returncode, out, err)
        held = 0
        if retry.returncode != 0:
            # the orphan held a partition longer than the retry waits for it (two leases): the retry fails
            # naming it, writing nothing there; the task's next retry, once the orphan has ended, resumes
            out = retry.stdout + retry.stderr
            assert retry.returncode == 1 and "another copier holds the target partition" in out, out[-4000:]
            assert f"(run {run!r}, host " in out, out[-4000:]
            held = out.count("another copier holds the target partition")
            wait_until(lambda: not alive(orphan), "the orphaned copy job to end", 300, ignore=MID_FAULT)
            retry = subprocess.run(job, capture_output=True, text=True, timeout=600, env=env, cwd=PROJECT_DIR)
            assert retry.returncode == 0, (retry.stdout + retry.stderr)[-4000:]
        wait_until(lambda: not alive(orphan), "the orphaned copy job to end", 300, ignore=MID_FAULT)
        orphan_out = orphan_log.read_text()
        assert f"{partitions} partitions copied" in orphan_out, orphan_out[-4000:]
    finally:
        set_client_quota(faulty.target, QUOTA_CLIENT, None)
        if alive(orphan):
            os.killpg(orphan, signal.SIGKILL)
        if started is not None and started.poll() is None:
            started.kill()
            started.wait(30)
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
    state, refused, pids = Claims(), 0, set()
    for _offset, _key, value, _headers, ts in records_of(stack.target, CLAIMS_TOPIC, 0):
        record = json.loads(value) if value else {}
        took = state.apply(ts, record)
        if record.get("kind") == "lease" and str(record.get("scope", "")).startswith(f"{topic}:"):
            pids.add((record.get("host"), record.get("pid")))
            refused += not took
    return refused, len(pids)


SECOND_RUN = """
import json, sys, time
from kmigrate.claims.runs import claim_topics
from kmigrate.config import ClusterConfig
from kmigrate.copy.partition import copy_partition
from kmigrate.copy.writer import CopyOptions
from kmigrate.model import WorkUnit
source, target, topic, end, run, action = sys.argv[1:7]
source, target = ClusterConfig.from_bootstrap("source", source), ClusterConfig.from_bootstrap("target", target)
claim_topics(target, run, [topic])
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
    claim_topics(faulty.target, first, [topic])
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
        wait_until(lambda: copied() > per_partition // 10, "run A to copy", 120, ignore=MID_FAULT)
        admin = AdminClient(faulty.target.admin())
        admin.delete_topics([CLAIMS_TOPIC], operation_timeout=30)[CLAIMS_TOPIC].result(60)
        deleted_at, at_delete = time.monotonic(), copied()
        wait_until(lambda: CLAIMS_TOPIC not in admin.list_topics(timeout=10).topics, "the claims topic gone", 60,
                   ignore=MID_FAULT)
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
    close_all()  # this process's claim log read the deleted topic: read the new one from its start
    assert release_topics(faulty.target, second)
    compare(faulty, topic, 1, "kmigrate-claims deleted while a run copies; a second run claims its topic and copies "
                              f"only after a lease (run A {'failed clearly' if a_error else 'completed'}, B resumed "
                              f"at {b_row['target_start']})")


def test_a_claims_log_younger_than_a_lease_grants_none():
    """The rule behind the test above, as every reader folds it: from the log's first record (offset
    0) on, for a lease's length, a lease takes effect only on a target partition its claimant found
    empty or one already leased in this log; then the usual rule."""
    state = Claims()
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
