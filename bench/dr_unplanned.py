"""bench-dr's unplanned failover: a mirror of its own (kafka_dr_mirror through the scheduler) of new
topics under bench-dr's load, the source broker killed with SIGKILL while the load writes, and
kafka_dr_failover with `unplanned` through the scheduler; then the source broker started again
(`stack.py up`) and what the failover lost read from it (kmigrate.run.mirror.promote.lost_records).
RTO: from the trigger to the DR cluster promoted (the part `failover/promoted`: transactions the
mirror left open aborted, groups checked, connectors created)."""
from __future__ import annotations

import datetime
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from kmigrate.manifest import Manifest
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror.promote import PROMOTED, lost_records

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "stack"))
import local_airflow as local  # noqa: E402

from common import PROJECT_DIR, SOURCE, TARGET, delete_groups, delete_topics, poll  # noqa: E402
from dr_load import Load  # noqa: E402

STACK = [sys.executable, str(PROJECT_DIR / "stack" / "stack.py")]


def unplanned_failover(airflow_url: str, state: Path, prefix: str, rate_mb: float, value_bytes: int,
                       say, seconds: float = 30.0) -> dict:  # noqa: ANN001 - say: print a line
    run = f"{prefix}u"
    load = Load(run, rate_mb, value_bytes)
    load.create()
    manifest = Manifest(str(state), run)
    pattern = re.escape(run) + r"\..*"
    topics = [load.plain, load.tx, load.compact]
    try:
        mirror_run = local.trigger(airflow_url, "kafka_dr_mirror", {
            "run_name": run, "topics_include": pattern, "groups": pattern, "state_location": str(state)})
        poll(lambda: (mirror_status.read(manifest) or {}).get("round", 0) >= 1, "the second mirror's first status", 300)
        load.start()
        say(f"unplanned failover: {rate_mb} MB/s on {run}.* for {seconds:.0f} s, then the source broker killed")
        time.sleep(seconds)  # the load's working time before the kill (a load, not a wait for a condition)
        killed = _kill_source_broker()
        triggered = time.time()
        failover_run = local.trigger(airflow_url, "kafka_dr_failover", {
            "run_name": run, "state_location": str(state), "unplanned": True, "stale_after_s": 20})
        load.stopping.set()  # its producers fail against the dead broker; they are not waited for
        state_of = local.wait_for_run(airflow_url, "kafka_dr_failover", failover_run, 900)
        mirror_state = local.wait_for_run(airflow_url, "kafka_dr_mirror", mirror_run, 300)
        promoted = manifest.read(PROMOTED) or {}
        rto = round(_epoch(promoted["at"]) - triggered, 2) if promoted.get("at") else None
        say(f"unplanned failover: {state_of} (source broker pid {killed} killed); RTO {rto} s; the source started again")
        subprocess.run([*STACK, "up"], check=True, stdout=subprocess.DEVNULL)
        lost = lost_records(manifest, SOURCE) if promoted else []
        return {"rto_s": rto, "run": state_of, "mirror_run": mirror_state,
                "records_lost": sum(r["offsets"] for r in lost), "partitions_lost": sum(r["offsets"] > 0 for r in lost),
                "behind_records": promoted.get("behind_records"), "behind_s_max": promoted.get("behind_s_max")}
    finally:
        load.stopping.set()
        if subprocess.run([*STACK, "status"], stdout=subprocess.PIPE, text=True).returncode:
            subprocess.run([*STACK, "up"], stdout=subprocess.DEVNULL)  # never leave the stack's source down
        delete_topics(SOURCE, topics)
        delete_topics(TARGET, topics)
        for cluster in (SOURCE, TARGET):
            delete_groups(cluster, load.groups)


def _kill_source_broker() -> int:
    report = json.loads(subprocess.run([*STACK, "status"], stdout=subprocess.PIPE, text=True).stdout)
    pid = report["source-kafka"]["pid"]
    os.killpg(pid, signal.SIGKILL)  # the stack starts each service in its own process group
    return pid


def _epoch(at: str) -> float:
    return datetime.datetime.fromisoformat(at).timestamp()
