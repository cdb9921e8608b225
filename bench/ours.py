"""This project's migration as the benchmarks run it against MirrorMaker 2 (bench_mm2.py,
bench_scale.py): snapshot, the Spark copy job, the verify job and group replication, each job a
spark-submit of its own or a Python client of the project's Spark Connect server (spark_connect_up,
started before any timing), the copying processes' CPU and RSS sampled, the target read back and
compared."""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from common import PROJECT_DIR, SOURCE, TARGET, Result, TreeSampler, Workload, compare, read_all, target_offsets
from kmigrate.manifest import Manifest
from kmigrate.run.records import timeline
from kmigrate_spark.clients import write_clients
from kmigrate.run.cutover.groups import replicate_groups
from kmigrate.run.cutover.snapshot import take_snapshot
from kmigrate_spark.conf import submit_args


@dataclass
class SparkConnectServer:
    url: str
    pid: int
    started: bool  # by this run (then it stops it)


def spark_cluster(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(PROJECT_DIR / "stack" / "spark_cluster.py"), *args],
                          capture_output=True, text=True)


def spark_connect_up(master: str) -> SparkConnectServer:
    """The project's Spark Connect server (make spark-connect-up), started unless it runs, before
    any timing: like MM2's Connect worker, a service that is already up when the copy starts."""
    up = spark_cluster("connect-up", "--connect-master", master)
    if up.returncode != 0:
        raise SystemExit(f"bench: the Spark Connect server did not start:\n{up.stdout}{up.stderr}")
    pid = json.loads(spark_cluster("status").stdout)["services"]["spark-connect"]
    return SparkConnectServer("sc://127.0.0.1:15002", int(pid), "started spark-connect" in up.stdout)


RUN_ID = "bench-mm2"  # the run id of each migration a benchmark runs (a state directory of its own each time)


def run_ours(w: Workload, args: argparse.Namespace, workdir: Path, server: SparkConnectServer | None = None,
             verify_after: bool = False) -> Result:
    """Snapshot, copy job, verify job, group replication. With `server`, the jobs run as Python
    clients of that running Spark Connect server; without, each is a spark-submit of its own. With
    `verify_after`, the copy job verifies in its own Spark session, as the migration DAG runs it
    (the verification's seconds then come from the run's timeline)."""
    result = Result("kmigrate (Spark Connect server)" if server else "kmigrate (spark-submit)")
    state, run_id = str(workdir / "state"), RUN_ID
    manifest = Manifest(state, run_id)
    clients = write_clients(workdir / "clients.json", SOURCE, TARGET)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    if server:
        launcher = [sys.executable]
    else:
        launcher = [str(Path(sys.executable).parent / "spark-submit"), "--master", args.spark_master,
                    *submit_args({"spark.ui.enabled": "false"})]

    def job(script: str, *extra: str) -> float:
        begun = time.monotonic()
        proc = subprocess.Popen([*launcher, str(PROJECT_DIR / "spark_jobs" / script), "--state-location", state,
                                 "--run-id", run_id, "--clients", str(clients), *extra,
                                 *(["--remote", server.url] if server else [])],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=PROJECT_DIR)
        with TreeSampler(lambda: [proc.pid, *([server.pid] if server else [])]) as sampler:
            out, _ = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"bench: {script} failed (exit {proc.returncode}):\n{out[-3000:]}")
        if script != "verify_partitions.py":  # the copy job
            result.cpu_s, result.peak_rss = sampler.cpu_s, sampler.peak_rss
        name = script.removesuffix(".py")
        for line in out.splitlines():  # the job's own phases (not its line a partition)
            if line.startswith(f"{name}: ") and "] " not in line:
                print(f"    {line}", flush=True)
        return time.monotonic() - begun

    started = time.monotonic()
    take_snapshot(manifest, SOURCE, topics_include=re.escape(w.prefix) + r"\..*",
                  groups=re.escape(w.prefix) + r"\..*")
    result.snapshot_s = time.monotonic() - started
    if verify_after:
        job("window_copy.py")
        result.verify_s = next(s["seconds"] for s in timeline.steps(manifest) if s["step"] == "verify")
        result.replicate_s = time.monotonic() - started - result.verify_s
    else:
        job("drill_copy.py")  # as the DR drill DAG runs it: the verify job follows
        result.replicate_s = time.monotonic() - started
    [part] = [p for p in manifest.parts() if p.startswith("copy-results/")]
    copied = manifest.read(part)
    result.copy_phase_s, result.warm_up_s = copied["seconds"], copied["warm_up_seconds"]
    print(f"  {result.tool}: every partition copied after {result.replicate_s:.1f}s (snapshot "
          f"{result.snapshot_s:.1f}s, job start-up {result.replicate_s - result.snapshot_s - result.copy_phase_s:.1f}s "
          f"of which warm-up {result.warm_up_s:.1f}s, copying {result.copy_phase_s:.1f}s)", flush=True)
    if not verify_after:
        result.verify_s = job("verify_partitions.py")
    groups_started = time.monotonic()
    replicate_groups(manifest, TARGET)
    result.groups_s = result.replicate_s + (time.monotonic() - groups_started)
    target = read_all(TARGET, w.partitions)
    compare(result, w, target, target_offsets(w.groups))
    return result
