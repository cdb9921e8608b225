"""The mirror's bookkeeping, from a run manifest alone: its spec written once, its status and
lag after a round, and what the DAG's heartbeat trigger makes of them."""
from __future__ import annotations

import asyncio
import threading
import time
from types import SimpleNamespace

import pytest
from kmigrate.errors import ConfigError
from kmigrate.manifest import Manifest
from kmigrate.renames import Renames
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror.driver import Mirror
from kmigrate.run.mirror.spec import MirrorSpec, read_spec, write_spec
from kmigrate.run.mirror.term import request_stop
from kmigrate_airflow.mirror import MirrorHeartbeatTrigger

T0 = 1_800_000_000.0


def test_a_runs_mirror_keeps_its_selection_and_refuses_another(tmp_path):
    manifest = Manifest(str(tmp_path), "dr")
    write_spec(manifest, MirrorSpec("orders\\..*", groups="billing"))
    write_spec(manifest, MirrorSpec("orders\\..*", groups="billing"))  # a restart: the same again
    assert read_spec(manifest) == MirrorSpec("orders\\..*", groups="billing")
    with pytest.raises(ConfigError, match="start a new run id"):
        write_spec(manifest, MirrorSpec("payments\\..*"))
    with pytest.raises(ConfigError, match="status interval"):
        MirrorSpec("x", interval_s=0).check()
    with pytest.raises(ConfigError, match="no mirror spec"):
        read_spec(Manifest(str(tmp_path), "other"))


def test_a_mirrors_renames_are_kept_with_its_selection_and_a_spec_written_before_them_reads_as_none(tmp_path):
    manifest = Manifest(str(tmp_path), "dr")
    renames = Renames(topic_prefix="a.", groups={"billing": "team-a.billing"})
    spec = MirrorSpec("orders", groups="billing", renames=renames)
    write_spec(manifest, spec)
    write_spec(manifest, spec)  # a restart: the same again
    assert read_spec(manifest).renames == renames
    assert manifest.read("mirror-spec")["renames"] == {"topic_prefix": "a.", "group_renames": {"billing": "team-a.billing"}}
    with pytest.raises(ConfigError, match="start a new run id"):
        write_spec(manifest, MirrorSpec("orders", groups="billing"))  # the same selection under other names
    older = Manifest(str(tmp_path), "older")
    older.write_once("mirror-spec", {"topics_include": "orders", "topics_exclude": "", "groups": "", "interval_s": 1.0,
                                     "refresh_s": 10.0, "verify_every_s": 30.0, "term_s": 3600.0, "connectors": []})
    assert read_spec(older).renames == Renames()
    write_spec(older, read_spec(older))  # a mirror of before renames restarted: its spec the same


def test_the_status_bounds_how_long_each_behind_record_waited():
    lag = mirror_status.Lag()
    lag.note(T0, {("t", 0): 100, ("t", 1): 50, ("t", 2): 80})
    lag.note(T0 + 1, {("t", 0): 110, ("t", 1): 50, ("t", 2): 90})
    source = {("t", 0): (0, 120), ("t", 1): (0, 50), ("t", 2): (10, 90)}
    lag.note(T0 + 2, {k: v[1] for k, v in source.items()})
    dr = {("t", 0): (0, 105), ("t", 1): (0, 50), ("t", 2): (0, 80)}
    behind = {k: lag.behind_s(T0 + 2.5, k, dr[k][1]) for k in source}
    # t[0]: the DR end 105 reached the source's end at T0 (100), not at T0 + 1 (110): its oldest missing
    # record was decided after T0; t[2] at 80 likewise; t[1] is caught up
    assert behind == {("t", 0): 2.5, ("t", 1): 0.0, ("t", 2): 2.5}
    assert lag.behind_s(T0 + 2.5, ("t", 0), 99) is None  # behind all that was kept: not known
    status = mirror_status.of_round(7, T0 + 2, T0 + 2.4, source, dr, {("t", 2): "leader moved", ("t", 1): "old"}, [],
                                    {"records": 20}, behind, term=3)
    rows = {p["partition"]: p for p in status["partitions"]}
    assert (rows[0]["behind_records"], rows[0]["behind_s"], rows[0]["dr_end"]) == (15, 2.5, 105)
    assert (rows[1]["behind_records"], rows[1]["behind_s"], rows[1]["error"]) == (0, 0.0, None)  # caught up since
    assert rows[2]["error"] == "leader moved" and rows[2]["dr_end"] == 80
    assert status["behind_records"] == 25 and status["behind_s_max"] == 2.5 and status["failed_partitions"] == 1
    assert status["term"] == 3 and mirror_status.heartbeat_age(status, now=T0 + 4.4) == pytest.approx(2.0)


def fired(trigger: MirrorHeartbeatTrigger) -> dict:
    async def first():
        async for event in trigger.run():
            return event.payload

    return asyncio.run(asyncio.wait_for(first(), 10))


def test_the_heartbeat_trigger_fires_stale_on_an_old_heartbeat_and_stopped_on_a_requested_stop(tmp_path):
    manifest = Manifest(str(tmp_path), "dr")
    status = mirror_status.of_round(4, time.time() - 30, time.time() - 29, {}, {}, {}, [], {})
    mirror_status.write(manifest, status)
    event = fired(MirrorHeartbeatTrigger(str(tmp_path), "dr", stale_after_s=5, since=time.time() - 60, poll_s=0.05))
    assert event["state"] == "stale" and event["round"] == 4 and event["age_s"] >= 29
    # a start a moment ago: its heartbeat is not stale yet, however old the last one is
    started = time.time()
    event = fired(MirrorHeartbeatTrigger(str(tmp_path), "dr", stale_after_s=0.3, since=started, poll_s=0.05))
    assert event["state"] == "stale" and time.time() - started >= 0.3
    request_stop(manifest, "failover")
    mirror_status.write(manifest, status, stopped=True)
    assert fired(MirrorHeartbeatTrigger(str(tmp_path), "dr", 60, time.time(), 0.05)) == {"state": "stopped", "round": 4}
    serialized = MirrorHeartbeatTrigger(str(tmp_path), "dr", 60, started).serialize()
    assert serialized[0] == "kmigrate_airflow.mirror.MirrorHeartbeatTrigger" and serialized[1]["since"] == started


def test_a_round_that_cannot_run_is_said_in_the_status_and_the_mirror_goes_on(tmp_path):
    from kmigrate.errors import ClusterUnavailable
    from kmigrate.run.mirror.driver import Mirror

    manifest = Manifest(str(tmp_path), "dr")
    said: list[str] = []
    mirror = Mirror(manifest, None, None, MirrorSpec("t", interval_s=0.01), lambda units, extras, term: [],
                    say=said.append)
    tries = []

    def round_that_fails() -> None:
        tries.append(1)
        if len(tries) == 3:
            request_stop(manifest, "enough")
        raise ClusterUnavailable("source (localhost:1): not reachable")

    mirror.term = lambda stop: round_that_fails()
    mirror.run(max_seconds=10)
    status = mirror_status.read(manifest)
    assert len(tries) == 3 and status["stopped"] and "not reachable" in status["error"]
    assert status["totals"]["failed_rounds"] == 3 and mirror_status.heartbeat_age(status) < 5
    assert "could not run: source (localhost:1): not reachable; trying again" in said[0]


def test_terms_that_keep_failing_wait_longer_between_them_up_to_a_limit_under_any_heartbeat_limit():
    pauses = [Mirror.pause(SimpleNamespace(failing=n, spec=SimpleNamespace(interval_s=0.5),
                                           BACKOFF_MAX_S=Mirror.BACKOFF_MAX_S)) for n in range(8)]
    # a first failure is tried again after the interval (the next term renews a lost session)
    assert pauses[:2] == [0.5, 0.5] and pauses[2:5] == [1.0, 2.0, 4.0] and set(pauses[5:]) == {4.0}
    assert Mirror.BACKOFF_MAX_S < 5  # the follower's smallest stale_after_s


def test_a_stop_with_a_cluster_away_waits_for_the_tasks_only_not_for_readings_that_would_time_out(tmp_path, monkeypatch):
    from kmigrate.errors import ClusterUnavailable
    from kmigrate.run.mirror.term import STOP

    from tests.support.waiting import wait_until

    manifest = Manifest(str(tmp_path), "dr")
    source_gone, reads = threading.Event(), []

    def ends(cluster, keys, *, stable, timeout_s=None, away=False, names=None):  # noqa: ANN001, ANN202
        reads.append((cluster, time.monotonic()))
        if cluster == "source" and source_gone.is_set():
            time.sleep(0.3)  # stands in for STATUS_TIMEOUT_S: a broker gone answers nothing
            raise ClusterUnavailable("cluster source did not say its partitions' leaders")
        return {key: (0, 10) for key in keys}

    def copy_term(units, extras, term):  # noqa: ANN001, ANN202 - the tasks see the stop themselves, end 1 s later
        wait_until(lambda: manifest.exists(STOP), "the stop", 30, poll_s=0.02)
        time.sleep(1.0)  # stands in for a task's reading of the source gone, which the stop does not cut short
        return []

    monkeypatch.setattr(mirror_status, "ends", ends)
    mirror = Mirror(manifest, "source", "target", MirrorSpec("t", interval_s=0.05, refresh_s=3600), copy_term,
                    say=lambda line: None)
    mirror.partitions, mirror.refreshed = {"t": 1}, time.monotonic()
    runner = threading.Thread(target=mirror.run, daemon=True)
    runner.start()
    wait_until(lambda: (mirror_status.read(manifest) or {}).get("round", 0) >= 2, "the mirror's rounds", 30, poll_s=0.02)
    source_gone.set()
    wait_until(lambda: (mirror_status.read(manifest) or {}).get("error"), "a reading that failed", 30, poll_s=0.02)
    asked, asked_at = time.monotonic(), time.time()
    request_stop(manifest, "an unplanned failover")
    runner.join(30)
    status = mirror_status.read(manifest)
    assert not runner.is_alive() and status["stopped"] and "did not say" in status["error"]
    # told with the source away, the driver read nothing more: each reading would have waited its
    # timeout, and the last one after the tasks ended too, holding the failover back
    assert [at for cluster, at in reads if at > asked] == []
    assert time.time() - mirror_status.heartbeat_age(status) > asked_at + 0.5  # and beat on while the tasks ended


def test_a_term_whose_tasks_end_first_with_a_cluster_away_ends_without_a_reading_that_would_time_out(tmp_path,
                                                                                                     monkeypatch):
    """The tasks see a stop themselves and may end before the driver does: its reading at the term's
    end, and the next term's first, check first that the clusters listen (`away`), as each reading
    after a failed one does."""
    from kmigrate.errors import ClusterUnavailable

    from tests.support.waiting import wait_until

    manifest = Manifest(str(tmp_path), "dr")
    source_gone, slow = threading.Event(), []

    def ends(cluster, keys, *, stable, timeout_s=None, away=False, names=None):  # noqa: ANN001, ANN202
        if cluster == "source" and source_gone.is_set():
            if not away:
                slow.append(time.monotonic())
                time.sleep(2.0)  # stands in for STATUS_TIMEOUT_S: a broker gone answers nothing
            raise ClusterUnavailable("source cluster: no bootstrap server accepts a connection")
        return {key: (0, 10) for key in keys}

    def copy_term(units, extras, term):  # noqa: ANN001, ANN202 - the tasks end once a reading failed
        wait_until(lambda: (mirror_status.read(manifest) or {}).get("error"), "a reading that failed", 30, poll_s=0.01)
        return []

    monkeypatch.setattr(mirror_status, "ends", ends)
    mirror = Mirror(manifest, "source", "target", MirrorSpec("t", interval_s=0.05, refresh_s=3600), copy_term,
                    say=lambda line: None)
    mirror.partitions, mirror.refreshed = {"t": 1}, time.monotonic()
    monkeypatch.setattr(mirror, "refresh", lambda: False)  # the selection as it was (a failed round reads it again)
    runner = threading.Thread(target=mirror.run, daemon=True)
    runner.start()
    wait_until(lambda: (mirror_status.read(manifest) or {}).get("round", 0) >= 2, "the mirror's rounds", 30, poll_s=0.02)
    source_gone.set()
    wait_until(lambda: mirror.totals["failed_rounds"] >= 3, "terms that could not begin", 30, poll_s=0.02)
    request_stop(manifest, "an unplanned failover")
    runner.join(30)
    assert not runner.is_alive() and mirror_status.read(manifest)["stopped"]
    assert len(slow) == 1  # the one reading that found the source gone; none after it waited
