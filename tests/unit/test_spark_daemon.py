"""The Python daemon the Spark executors fork their workers from (kmigrate_spark.daemon). pyspark
runs a full gc.collect() in a worker after every task; the daemon freezes what it imported, so
that collection does not walk the library's and pyspark's objects again each time."""
from __future__ import annotations

import json
import subprocess
import sys


def in_a_fresh_interpreter(code: str) -> dict:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_the_daemon_freezes_what_it_imported_and_starts_no_thread():
    seen = in_a_fresh_interpreter(
        "import gc, json, threading, time\n"
        "import kmigrate_spark.daemon\n"
        "started = time.perf_counter(); gc.collect(); collect_ms = (time.perf_counter() - started) * 1000\n"
        "print(json.dumps({'frozen': gc.get_freeze_count(), 'threads': threading.active_count(),\n"
        "                  'collect_ms': collect_ms}))")
    assert seen["frozen"] > 10_000  # pyspark.worker, confluent_kafka and the copier: ~40,000 objects
    assert seen["threads"] == 1  # a forked worker would get no copy of another thread
    print(f"gc.collect() in a worker: {seen['collect_ms']:.2f} ms with {seen['frozen']} objects frozen")
