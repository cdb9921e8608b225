"""Running the continuous mirror in the tests: its job started as a Spark Connect client, or its driver
on a thread of the test's process (`mirrored`); followed through its status part, stopped through the
run manifest."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from pathlib import Path

from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.manifest import Manifest
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror.driver import Mirror
from kmigrate.run.mirror.spec import MirrorSpec, write_spec
from kmigrate.run.mirror.task import copy_term_here
from kmigrate.run.mirror.term import request_stop

from tests.support.stack import PROJECT_DIR
from tests.support.waiting import wait_until


def start_mirror(state: Path, run_id: str, clients: Path, remote: str, *extra: str,
                 env: dict[str, str] | None = None, log: Path | None = None) -> subprocess.Popen:
    """The mirror job started; its output in `log` when given (a pipe nobody reads while the test
    waits would fill, and block the mirror at its next line), else piped."""
    out = log.open("w") if log else None
    try:
        return subprocess.Popen(
            [sys.executable, str(PROJECT_DIR / "spark_jobs" / "mirror.py"), "--state-location", str(state),
             "--run-id", run_id, "--clients", str(clients), "--remote", remote, *extra],
            stdout=out or subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=PROJECT_DIR,
            env={**os.environ, **(env or {})})
    finally:
        if out:
            out.close()  # the mirror holds its own


def wait_for_round(manifest: Manifest, at_least: int, timeout_s: float = 240.0) -> dict:
    return wait_until(lambda: (s := mirror_status.read(manifest)) and s["round"] >= at_least and s,
                      f"mirror round {at_least}", timeout_s)


def wait_caught_up(manifest: Manifest, source, topics: dict[str, int], timeout_s: float = 240.0) -> dict:
    """The mirror's status once a round that began after the source's ends of now left every
    partition at them with no failure."""
    keys = [(t, p) for t, n in topics.items() for p in range(n)]
    with ClusterAdmin(source) as admin:
        ends = admin.stable_ends(keys, retry=True)
    first = wait_for_round(manifest, 1, timeout_s)["round"] + 1

    def done():
        status = mirror_status.read(manifest)
        dr = {(p["topic"], p["partition"]): p["dr_end"] for p in status["partitions"]}
        return (status["round"] > first and not status["failed_partitions"]
                and all(dr.get(k) == ends[k] for k in keys) and status)

    def lagging() -> str:
        status = mirror_status.read(manifest)
        late = [f"{p['topic']}[{p['partition']}] at {p['dr_end']} of {ends[(p['topic'], p['partition'])]}"
                + (f" ({p['error']})" if p["error"] else "") for p in status["partitions"]
                if p["dr_end"] != ends.get((p["topic"], p["partition"]), p["dr_end"]) or p["error"]]
        return f"the mirror caught up with the source (round {status['round']}; behind: {'; '.join(late)})"

    try:
        return wait_until(done, "the mirror caught up with the source", timeout_s)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {lagging()}") from None


def stop_mirror(manifest: Manifest, process: subprocess.Popen, timeout_s: float = 120.0) -> str:
    """Request the stop; the job's output once it exited 0."""
    request_stop(manifest, "the test is done")
    out, _ = process.communicate(timeout=timeout_s)
    assert process.returncode == 0, out[-4000:]
    return out


@contextlib.contextmanager
def mirrored(stack, manifest: Manifest, spec: MirrorSpec, copy_term=None):  # noqa: ANN001
    """The mirror's driver on a thread of this process, its terms copied here (`copy_term_here`, or
    `copy_term`), its spec written in the run manifest first as the mirror's job writes it (what the
    moves, failovers and drills of the mirror read); stopped on leaving."""
    write_spec(manifest, spec)
    copy_term = copy_term or (lambda units, extras, term: copy_term_here((stack.source, stack.target), units, extras,
                                                                         term))
    mirror = Mirror(manifest, stack.source, stack.target, spec, copy_term, say=lambda _: None)
    stopping, failures = threading.Event(), []

    def run() -> None:
        try:
            mirror.run(stopping.is_set, max_seconds=300)
        except BaseException as exc:  # noqa: BLE001 - raised in the test's thread below
            failures.append(exc)

    driver = threading.Thread(target=run, daemon=True)
    driver.start()
    try:
        yield
    finally:
        stopping.set()
        driver.join(120)
    assert not driver.is_alive() and not failures, failures
