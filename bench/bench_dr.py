"""make bench-dr: this project's continuous mirror (kafka_dr_mirror) and MirrorMaker 2 mirroring
the same live source side by side, then a planned failover (kafka_dr_failover), both DAGs run
through the real scheduler of `make airflow-up` (triggered through its REST API).

The source: a plain topic of 20 partitions (an idempotent producer), a transactional topic of 2
(transactions of 50 records, every 5th aborted) and a compacted one of 2 (1,000 keys), together
--rate-mb MB/s of 1 KiB incompressible values for --minutes, and two consumer groups consuming the
plain topic and committing every second. MirrorMaker 2 (MirrorSourceConnector and
MirrorCheckpointConnector on the target's Connect worker, its default replication policy: topics
named source.<topic> on the DR cluster, so that both mirrors write to the same DR cluster at once)
and the mirror start before the load. How long a record takes to reach the DR cluster: every 10th
record of the plain topic is timed from its acknowledgement on the source to the first of the DR
cluster's end offsets (read every 0.1 s) past its offset, for both (the plain topic starts at
offset 0 and has no markers, so MM2 writes each record at its source offset too). Then the load and
the consumers stop, and the failover runs: records lost are the offsets the source holds that the
DR cluster does not; the groups are compared offset by offset; MM2's switchover duplicates are the
records a group would read twice on the DR cluster from the offsets MM2 synced.

Last line: one JSON object. Failover RTO is the time from the trigger to the connectors resumed on
the DR cluster (the run's report), the scheduler's task starts included."""
from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import re
import sys
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer
from kmigrate.claims import CLAIMS_TOPIC
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.connect import ConnectClient
from kmigrate.manifest import Manifest
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror.loop import request_stop
from kmigrate.run.report.markdown import write_report

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "stack"))
import local_airflow as local  # noqa: E402

from common import PROJECT_DIR, SOURCE, TARGET, delete_groups, delete_topics, poll  # noqa: E402
from mm2 import TARGET_CONNECT_URL, mm2_configs  # noqa: E402

STATE = PROJECT_DIR / ".stack" / "bench-dr" / "state"
SAMPLE_EVERY = 10


def say(line: str) -> None:
    print(f"bench-dr: {line}", flush=True)


class Load:
    """The source's writers and consumers, each a thread; `acked` holds (partition, offset,
    acknowledged at) of every SAMPLE_EVERY-th record of the plain topic."""

    def __init__(self, prefix: str, rate_mb: float, value_bytes: int, cluster=SOURCE) -> None:
        self.prefix, self.value_bytes, self.cluster = prefix, value_bytes, cluster
        self.per_s = rate_mb * 1e6 / value_bytes
        self.plain, self.tx, self.compact = (f"{prefix}.{n}" for n in ("plain", "tx", "compact"))
        self.groups = [f"{prefix}.readers-{i}" for i in range(2)]
        self.acked: list[tuple[int, int, float]] = []
        self.written = 0
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=t, daemon=True) for t in
                        (self._plain, self._transactional, self._compacted, *[self._consumer(g) for g in self.groups])]

    def create(self) -> None:
        with ClusterAdmin(SOURCE) as admin:
            admin.create_topic(self.plain, 20, {})
            admin.create_topic(self.tx, 2, {})
            admin.create_topic(self.compact, 2, {"cleanup.policy": "compact", "segment.ms": "10000",
                                                 "min.cleanable.dirty.ratio": "0.01"})
            admin.wait_for_topics({self.plain: 20, self.tx: 2, self.compact: 2})

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(60)

    def _paced(self, share: float, write) -> None:
        """`write(i)` at `share` of the load's records per second, in steps of 10 ms."""
        began, i = time.monotonic(), 0
        while not self.stopping.is_set():
            due = int((time.monotonic() - began) * self.per_s * share)
            while i < due and not self.stopping.is_set():
                write(i)
                i += 1
            time.sleep(0.01)

    def _value(self) -> bytes:
        return random.randbytes(self.value_bytes)

    def _plain(self) -> None:
        producer = Producer(self.cluster.producer(**{"enable.idempotence": True, "linger.ms": 5}))

        def acked(err, msg) -> None:
            if err is None and msg.offset() % SAMPLE_EVERY == 0:
                self.acked.append((msg.partition(), msg.offset(), time.time()))

        def write(i: int) -> None:
            producer.produce(self.plain, self._value(), partition=i % 20, on_delivery=acked)
            producer.poll(0)
            self.written += 1

        self._paced(0.9, write)
        producer.flush(60)

    def _transactional(self) -> None:
        producer = Producer(SOURCE.producer(**{"transactional.id": f"{self.prefix}-tx", "linger.ms": 5}))
        producer.init_transactions(60)
        state = {"n": 0}

        def write(i: int) -> None:
            if i % 50 == 0:
                producer.begin_transaction()
            producer.produce(self.tx, self._value(), partition=i % 2)
            if i % 50 == 49:
                state["n"] += 1
                if state["n"] % 5 == 0:
                    producer.flush(60)  # librdkafka purges what is in flight on an abort, and its sequences break
                    producer.abort_transaction(60)
                else:
                    producer.commit_transaction(60)

        self._paced(0.05, write)
        try:
            producer.commit_transaction(60)
        except Exception:  # noqa: BLE001 - no transaction was open
            pass

    def _compacted(self) -> None:
        producer = Producer(SOURCE.producer(**{"linger.ms": 5}))
        self._paced(0.05, lambda i: (producer.produce(self.compact, self._value(), key=str(i % 1000).encode(),
                                                      partition=i % 2), producer.poll(0)))
        producer.flush(60)

    def _consumer(self, group: str):
        def consume() -> None:
            consumer = Consumer(self.cluster.consumer(group, **{"enable.auto.commit": True, "auto.commit.interval.ms": 1000,
                                                          "enable.partition.eof": False}))
            consumer.subscribe([self.plain])
            while not self.stopping.is_set():
                consumer.consume(2000, 0.5)
            consumer.close()  # commits, then leaves: the group is empty when the failover quiesces
        return consume


class Watcher(threading.Thread):
    """The DR cluster's end offsets of the plain topic's partitions under each mirror's name, every
    0.1 s: [(time, {name: [end a partition]})]."""

    def __init__(self, topics: dict[str, str]) -> None:
        super().__init__(daemon=True)
        self.topics, self.samples = topics, []
        self.stopping = threading.Event()

    def run(self) -> None:
        keys = {name: [(t, p) for p in range(20)] for name, t in self.topics.items()}
        with ClusterAdmin(TARGET) as admin:
            while not self.stopping.wait(0.1):
                try:
                    ends = admin.end_offsets([k for ks in keys.values() for k in ks])
                except Exception:  # noqa: BLE001 - topics not created yet
                    continue
                self.samples.append((time.time(), {n: [ends[k] for k in ks] for n, ks in keys.items()}))


def latencies(acked: list[tuple[int, int, float]], samples: list, name: str) -> list[float]:
    """Seconds from each sampled record's acknowledgement to the first sample of `name`'s DR end past it."""
    out, i = [], 0
    for partition, offset, at in sorted(acked, key=lambda a: a[2]):
        while i < len(samples) and samples[i][0] < at:
            i += 1
        j = i
        while j < len(samples) and samples[j][1][name][partition] <= offset:
            j += 1
        if j < len(samples):
            out.append(samples[j][0] - at)
    return out


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--rate-mb", type=float, default=5.0)
    parser.add_argument("--value-bytes", type=int, default=1024)
    parser.add_argument("--airflow-url", default=f"http://127.0.0.1:{local.UI_PORT}")
    args = parser.parse_args()
    prefix = f"drb{uuid.uuid4().hex[:6]}"
    load = Load(prefix, args.rate_mb, args.value_bytes)
    load.create()
    connect = ConnectClient(TARGET_CONNECT_URL)
    configs = mm2_configs(prefix, 4, identity=False)
    pattern = re.escape(prefix) + r"\..*"
    manifest = Manifest(str(STATE), prefix)
    watcher = Watcher({"ours": load.plain, "mm2": f"source.{load.plain}"})
    try:
        say(f"mirroring {prefix}.* with kafka_dr_mirror (run {prefix}) and MirrorMaker 2 (source.{prefix}.*)")
        mirror_run = local.trigger(args.airflow_url, "kafka_dr_mirror", {
            "run_name": prefix, "topics_include": pattern, "groups": pattern, "state_location": str(STATE)})
        for name, config in configs.items():
            connect.create(name, config)
        poll(lambda: (mirror_status.read(manifest) or {}).get("round", 0) >= 1, "the mirror's first status", 300)
        watcher.start()
        began = time.time()
        load.start()
        say(f"load: {args.rate_mb} MB/s of {args.value_bytes} B values for {args.minutes} min, two groups consuming")
        while time.time() - began < args.minutes * 60:
            time.sleep(10)
            status = mirror_status.read(manifest) or {}
            say(f"  {time.time() - began:5.0f}s: {load.written:,} plain records written; mirror status "
                f"{status.get('round')} (term {status.get('term')}), {status.get('behind_records')} offsets behind, "
                f"the oldest missing record decided at most {status.get('behind_s_max')}s ago")
        load.stop()
        seconds = time.time() - began
        with ClusterAdmin(SOURCE) as admin:
            ends = admin.end_offsets([(load.plain, p) for p in range(20)])
        poll(lambda: watcher.samples and all(watcher.samples[-1][1][n][p] >= ends[(load.plain, p)]
                                            for n in ("ours", "mm2") for p in range(20)),
             "both mirrors at the plain topic's end", 300)
        poll(mm2_groups_still(load), "MM2's synced group offsets to stand still for 3 s", 120)
        watcher.stopping.set()
        ours, mm2 = latencies(load.acked, watcher.samples, "ours"), latencies(load.acked, watcher.samples, "mm2")
        say(f"record to the DR cluster: ours p50 {percentile(ours, 0.5)} s p99 {percentile(ours, 0.99)} s; "
            f"MM2 p50 {percentile(mm2, 0.5)} s p99 {percentile(mm2, 0.99)} s ({len(ours)} and {len(mm2)} samples)")
        mm2_dups = mm2_switchover_duplicates(load)
        for name in configs:  # MM2 is measured: it would mirror the failback's writes to the original too
            connect.delete(name)
        say("planned failover through the scheduler (kafka_dr_failover)")
        triggered = time.time()
        failover_run = local.trigger(args.airflow_url, "kafka_dr_failover", {
            "run_name": prefix, "state_location": str(STATE), "quiesce_seconds": 2})
        failed_over = local.wait_for_run(args.airflow_url, "kafka_dr_failover", failover_run, 900)
        mirror_state = local.wait_for_run(args.airflow_url, "kafka_dr_mirror", mirror_run, 120)
        _, summary = write_report(manifest)
        resumed = summary.get("resumed_at")
        rto = None if not resumed else round(_epoch(resumed) - triggered, 2)
        lost = records_lost(load)
        back = failback(args, load, pattern, prefix) if failed_over == "success" else {}
        out = {"seconds_loaded": round(seconds, 1), "mb_per_s": round(load.written * args.value_bytes / 0.9 / seconds / 1e6, 2),
               "partitions": 24, "rpo_p50_s": percentile(ours, 0.5), "rpo_p99_s": percentile(ours, 0.99),
               "mm2_lag_p50_s": percentile(mm2, 0.5), "mm2_lag_p99_s": percentile(mm2, 0.99), "samples": len(ours),
               "planned_failover_rto_s": rto, "planned_failover_window_s": summary.get("downtime_s"),
               "unplanned_failover_rto_s": None, "records_lost_planned": lost,
               "partitions_equal": summary.get("partitions_equal"), "groups_exact": summary.get("groups_exact"),
               "groups": len(load.groups), "failback_duplicates": back.get("duplicates"),
               "failback_rto_s": back.get("rto_s"), "failback_records_lost": back.get("lost"),
               "failback_groups_exact": back.get("groups_exact"), "mm2_switchover_duplicates": mm2_dups,
               "failover_run": failed_over, "mirror_run": mirror_state, "failback_runs": back.get("runs"),
               "report": summary.get("report")}
        print(json.dumps(out))
        return 0 if failed_over == "success" and lost == 0 and summary.get("groups_exact") == len(load.groups) else 1
    finally:
        watcher.stopping.set()
        load.stopping.set()
        request_stop(manifest, "bench-dr is done")  # the mirror's DAG run ends with it, before its topics go
        poll(lambda: (mirror_status.read(manifest) or {"stopped": True})["stopped"], "the mirror to stop", 120)
        for name in configs:
            if name in connect.connectors():
                connect.delete(name)
        request_stop(Manifest(str(STATE), f"{prefix}-back"), "bench-dr is done")
        topics = [load.plain, load.tx, load.compact]
        # the failback's mirror claimed its topics on the original (the stack's source, which the tests
        # expect never written to): its claims log goes too
        delete_topics(SOURCE, [*topics, CLAIMS_TOPIC])
        delete_topics(TARGET, [*topics, *(f"source.{t}" for t in topics)])
        for cluster in (SOURCE, TARGET):
            delete_groups(cluster, load.groups)


def failback(args: argparse.Namespace, load: Load, pattern: str, prefix: str) -> dict:
    """After the planned failover: the applications write and consume on the DR cluster for a while,
    then the failback through the scheduler: kafka_dr_mirror with failback_of (the DR cluster its
    source, the original its target), and once the original has caught up, kafka_dr_failover of that
    mirror. Duplicates: the records each group would read again on the original (its DR position past
    its position there); lost: the DR cluster's offsets the original lacks."""
    say("the applications on the DR cluster for 20 s, then the failback through the scheduler")
    on_dr = Load(prefix, args.rate_mb / 5, args.value_bytes, cluster=TARGET)
    on_dr.threads = [threading.Thread(target=t, daemon=True) for t in (on_dr._plain, *map(on_dr._consumer, on_dr.groups))]
    on_dr.start()
    time.sleep(20)  # the applications' working time on the DR cluster (a load, not a wait for a condition)
    on_dr.stop()
    back = f"{prefix}-back"
    conns = {"source_kafka_conn_id": "kafka_target", "target_kafka_conn_id": "kafka_source",
             "state_location": str(STATE)}
    mirror_run = local.trigger(args.airflow_url, "kafka_dr_mirror", {
        "run_name": back, "topics_include": pattern, "groups": pattern, "failback_of": prefix, **conns})
    keys = [(load.plain, p) for p in range(20)] + [(t, p) for t in (load.tx, load.compact) for p in range(2)]

    def caught_up() -> bool:
        with ClusterAdmin(SOURCE) as original, ClusterAdmin(TARGET) as dr:
            try:
                return original.end_offsets(keys) == dr.end_offsets(keys)
            except Exception:  # noqa: BLE001 - a rebuilt topic not there yet
                return False
    poll(caught_up, "the original caught up with the DR cluster through the mirror back", 600)
    triggered = time.time()
    run = local.trigger(args.airflow_url, "kafka_dr_failover", {"run_name": back, "quiesce_seconds": 2, **conns})
    state = local.wait_for_run(args.airflow_url, "kafka_dr_failover", run, 900)
    mirror_state = local.wait_for_run(args.airflow_url, "kafka_dr_mirror", mirror_run, 120)
    _, summary = write_report(Manifest(str(STATE), back))
    resumed = summary.get("resumed_at")
    with ClusterAdmin(SOURCE) as original, ClusterAdmin(TARGET) as dr:
        lost = sum(max(0, d - o) for d, o in zip(dr.end_offsets(keys).values(), original.end_offsets(keys).values()))
        # the mirrored topics' offsets only: on the DR cluster the groups also hold MM2's, of its source.* topics
        positions = {g: tuple({k: o for k, o in side.committed_offsets(g).items() if k in keys} for side in (dr, original))
                     for g in load.groups}
    duplicates = sum(max(0, at - there.get(k, 0)) for here, there in positions.values() for k, at in here.items())
    exact = sum(here == there for here, there in positions.values())
    say(f"failback: {state}; {duplicates} records a group would read again on the original, {lost} offsets lost, "
        f"{exact} of {len(load.groups)} groups exact")
    return {"duplicates": duplicates, "lost": lost, "groups_exact": exact, "runs": [mirror_state, state],
            "rto_s": None if not resumed else round(_epoch(resumed) - triggered, 2)}


def mm2_groups_still(load: Load, still_s: float = 3.0):
    """A condition: MM2's synced offsets of the groups on the DR cluster unchanged for `still_s` (its
    checkpoints of the groups' last commits come every second)."""
    seen: dict = {"offsets": None, "since": 0.0}

    def still() -> bool:
        with ClusterAdmin(TARGET) as target:
            now = {g: target.committed_offsets(g) for g in load.groups}
        if now != seen["offsets"]:
            seen.update(offsets=now, since=time.monotonic())
        return time.monotonic() - seen["since"] >= still_s

    return still


def mm2_switchover_duplicates(load: Load) -> int:
    """Records each group would read again on the DR cluster from the offsets MM2 synced there (its
    source position minus MM2's, a partition of the plain topic, whose offsets MM2 keeps)."""
    dups = 0
    with ClusterAdmin(SOURCE) as source, ClusterAdmin(TARGET) as target:
        for group in load.groups:
            theirs = source.committed_offsets(group)
            synced = target.committed_offsets(group)
            for p in range(20):
                at = theirs.get((load.plain, p))
                if at is not None:
                    dups += max(0, at - synced.get((f"source.{load.plain}", p), 0))
    return dups


def records_lost(load: Load) -> int:
    """Offsets the source holds past the DR cluster's end, over every partition."""
    keys = [(load.plain, p) for p in range(20)] + [(t, p) for t in (load.tx, load.compact) for p in range(2)]
    with ClusterAdmin(SOURCE) as source, ClusterAdmin(TARGET) as target:
        theirs, ours = source.end_offsets(keys), target.end_offsets(keys)
    return sum(max(0, theirs[k] - ours[k]) for k in keys)


def _epoch(at: str) -> float:
    return datetime.datetime.fromisoformat(at).timestamp()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
