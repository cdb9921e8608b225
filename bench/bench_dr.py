"""make bench-dr: this project's continuous mirror (kafka_dr_mirror) and MirrorMaker 2 mirroring
the same live source side by side, then a planned failover (kafka_dr_failover), both DAGs run
through the real scheduler of `make airflow-up` (triggered through its REST API).

The source: a plain topic of 20 partitions (an idempotent producer), a transactional topic of 2
(transactions of 50 records, every 5th aborted) and a compacted one of 2 (1,000 keys), together
--rate-mb MB/s of 1 KiB incompressible values for --minutes, and two consumer groups consuming the
plain topic and committing every second. MirrorMaker 2 (MirrorSourceConnector and
MirrorCheckpointConnector on the target's Connect worker, its default replication policy: topics
named source.<topic> on the DR cluster, so that both mirrors write to the same DR cluster at once)
and the mirror start before the load, and both hold a warm-up record in every partition before it
starts (their task starts and first copies are not timed). How long a record takes to reach the DR cluster: every 10th
record of the plain topic is timed from its acknowledgement on the source to the first of the DR
cluster's end offsets (read every 0.1 s) past its offset, for both (the plain topic starts at
offset 0 and has no markers, so MM2 writes each record at its source offset too). Then the load and
the consumers stop, and the failover runs: records lost are the offsets the source holds that the
DR cluster does not; the groups are compared offset by offset; MM2's switchover duplicates are the
records a group would read twice on the DR cluster from the offsets MM2 synced. After the failback,
an unplanned failover of a second mirror (bench/dr_unplanned.py): the source broker killed under the
load, the DR cluster promoted through the scheduler, the broker started again.

What watching the mirror costs: over the load, a Prometheus scraping the exporter of the
benchmark's state location (every --scrape-s) runs in turns of --metrics-switch-s with both stopped
(bench/metrics_ab.py); `metrics_on_p99_s` and `metrics_off_p99_s` are the mirror's p99 over the
records acknowledged in each kind of window past the first minute (as the settled p99s),
`metrics_p99_ratio` the first over the second.

The collection pauses of the source broker, the DR broker and MM2's worker over the load are read from
their gc.log (`gc_paused_s`): both mirrors wait on the brokers', the tail of both lags with them.

Last line: one JSON object. `rpo_p99_s` and `mm2_lag_p99_s` cover the whole load;
`rpo_p99_settled_s` and `mm2_lag_p99_settled_s` the records acknowledged past its first minute, in
which MM2 is often slow after its worker started. Failover RTO is the time from the trigger to the
connectors resumed on the DR cluster (the run's report; unplanned: the DR cluster promoted), the
scheduler's task starts included."""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import sys
import threading
import time
import uuid
from pathlib import Path

from kmigrate.claims.log import CLAIMS_TOPIC
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.connect import ConnectClient
from kmigrate.manifest import Manifest
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror.term import request_stop
from kmigrate.run.report.markdown import write_report

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "stack"))
import local_airflow as local  # noqa: E402

from common import PROJECT_DIR, SOURCE, TARGET, delete_groups, delete_topics, gc_pauses, poll  # noqa: E402
from dr_load import Load, Watcher, latencies, percentile  # noqa: E402
from dr_unplanned import unplanned_failover  # noqa: E402
from metrics_ab import MetricsInTurns  # noqa: E402
from mm2 import TARGET_CONNECT_URL, mm2_configs  # noqa: E402

STATE = PROJECT_DIR / ".stack" / "bench-dr" / "state"
SETTLED_S = 60  # `*_settled_s`: the records acknowledged this long after the load started, or later
# the JVMs both mirrors wait on, and MM2's worker: their collection pauses over the load are reported
GC_LOGGED = {"source_broker": "source-kafka", "dr_broker": "target-kafka", "dr_connect_worker": "target-connect"}


def say(line: str) -> None:
    print(f"bench-dr: {line}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--rate-mb", type=float, default=5.0)
    parser.add_argument("--value-bytes", type=int, default=1024)
    parser.add_argument("--airflow-url", default=f"http://127.0.0.1:{local.UI_PORT}")
    parser.add_argument("--scrape-s", type=float, default=5.0, help="Prometheus's scrape interval when on")
    parser.add_argument("--metrics-switch-s", type=float, default=30.0, help="each window of metrics on or off")
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
        load.warm_up()  # both mirrors copying before the clock runs: their start is not what is timed
        poll(lambda: warmed_up(load), "both mirrors to hold the warm-up records", 300)
        watcher.start()
        began = time.time()
        load.start()
        say(f"load: {args.rate_mb} MB/s of {args.value_bytes} B values for {args.minutes} min, two groups consuming; "
            f"metrics off and on in turns of {args.metrics_switch_s:g} s (Prometheus scraping every "
            f"{args.scrape_s:g} s when on)")
        with MetricsInTurns(STATE.parent / "prometheus", str(STATE), prefix, port=17290, exporter_port=17668,
                            scrape_s=args.scrape_s, switch_s=args.metrics_switch_s) as turns:
            while time.time() - began < args.minutes * 60:
                time.sleep(10)
                status = mirror_status.read(manifest) or {}
                say(f"  {time.time() - began:5.0f}s: {load.written:,} plain records written; mirror status "
                    f"{status.get('round')} (term {status.get('term')}), {status.get('behind_records')} offsets "
                    f"behind, the oldest missing record decided at most {status.get('behind_s_max')}s ago")
        load.stop()
        seconds = time.time() - began
        paused = {name: gc_pauses(PROJECT_DIR / ".stack" / service, began, began + seconds)
                  for name, service in GC_LOGGED.items()}
        say("collection pauses over the load (count, seconds paused, longest): " + "; ".join(
            f"{name} {p['pauses']}, {p['paused_s']} s, {p['longest_s']} s" if p else f"{name} not logged (a stack "
            "started before its JVMs logged their collections)" for name, p in paused.items()))
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
        # past the first minute (MM2's first minute is often slow after its worker starts): each p99 alone
        settled = {name: percentile(latencies(load.acked, watcher.samples, name, began + SETTLED_S), 0.99)
                   for name in ("ours", "mm2")}
        say(f"past the first {SETTLED_S} s: ours p99 {settled['ours']} s; MM2 p99 {settled['mm2']} s")
        by_window = turns.split([a for a in load.acked if a[2] >= began + SETTLED_S])  # as the settled p99s
        metered = {on: latencies(by_window[on], watcher.samples, "ours") for on in (True, False)}
        metrics = {"metrics_on_p50_s": percentile(metered[True], 0.5), "metrics_on_p99_s": percentile(metered[True], 0.99),
                   "metrics_off_p50_s": percentile(metered[False], 0.5),
                   "metrics_off_p99_s": percentile(metered[False], 0.99),
                   "metrics_samples": {"on": len(metered[True]), "off": len(metered[False])},
                   "metrics_rounds_scraped": len(turns.scraped_rounds)}
        off_p99 = metrics["metrics_off_p99_s"]
        metrics["metrics_p99_ratio"] = round(metrics["metrics_on_p99_s"] / off_p99, 3) if off_p99 else None
        say(f"metrics on: p50 {metrics['metrics_on_p50_s']} s p99 {metrics['metrics_on_p99_s']} s; off: p50 "
            f"{metrics['metrics_off_p50_s']} s p99 {off_p99} s ({len(metered[True])} and "
            f"{len(metered[False])} samples; {len(turns.scraped_rounds)} status rounds read back from Prometheus)")
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
        unplanned = unplanned_failover(args.airflow_url, STATE, prefix, args.rate_mb, args.value_bytes, say) \
            if failed_over == "success" else {}
        out = {"seconds_loaded": round(seconds, 1), "mb_per_s": round(load.written * args.value_bytes / 0.9 / seconds / 1e6, 2),
               "partitions": 24, "rpo_p50_s": percentile(ours, 0.5), "rpo_p99_s": percentile(ours, 0.99),
               "mm2_lag_p50_s": percentile(mm2, 0.5), "mm2_lag_p99_s": percentile(mm2, 0.99), "samples": len(ours),
               "rpo_p99_settled_s": settled["ours"], "mm2_lag_p99_settled_s": settled["mm2"],
               "planned_failover_rto_s": rto, "planned_failover_window_s": summary.get("downtime_s"),
               "unplanned_failover_rto_s": unplanned.get("rto_s"), "records_lost_planned": lost,
               "partitions_equal": summary.get("partitions_equal"), "groups_exact": summary.get("groups_exact"),
               "groups": len(load.groups), "failback_duplicates": back.get("duplicates"),
               "failback_rto_s": back.get("rto_s"), "failback_records_lost": back.get("lost"),
               "failback_groups_exact": back.get("groups_exact"), "mm2_switchover_duplicates": mm2_dups,
               "unplanned_records_lost": unplanned.get("records_lost"),
               "unplanned_partitions_lost": unplanned.get("partitions_lost"),
               "unplanned_behind_records": unplanned.get("behind_records"), "unplanned_run": unplanned.get("run"),
               "failover_run": failed_over, "mirror_run": mirror_state, "failback_runs": back.get("runs"),
               "gc_paused_s": {name: p and p["paused_s"] for name, p in paused.items()},
               **metrics, "report": summary.get("report")}
        print(json.dumps(out))
        return 0 if (failed_over == "success" and lost == 0 and summary.get("groups_exact") == len(load.groups)
                     and unplanned.get("run") == "success") else 1
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


def warmed_up(load: Load) -> bool:
    """Whether every partition of both mirrors' DR topics holds the warm-up record."""
    keys = load.partitions()
    try:
        with ClusterAdmin(TARGET) as admin:
            ends = admin.end_offsets(keys + [(f"source.{t}", p) for t, p in keys])
    except Exception:  # noqa: BLE001 - MirrorMaker 2 has not created its topics yet
        return False
    return all(end >= 1 for end in ends.values())


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
