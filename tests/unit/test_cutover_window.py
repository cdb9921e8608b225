"""The cutover window's bookkeeping, from a run manifest alone: the step table, which offsets
were verified when, and a run name that names one request."""
from __future__ import annotations

import pytest
from kmigrate.errors import RunConflict
from kmigrate.manifest import Manifest, Part
from kmigrate.run.records import events
from kmigrate.run.records import timeline
from kmigrate.run.report.markdown import _covered
from kmigrate.run.checks.request import check_request, record_request

T0 = 1_800_000_000.0  # epoch seconds


def at(seconds: float) -> str:
    return timeline.iso(T0 + seconds)


def test_the_window_table_takes_each_step_once_from_the_stop_and_keeps_the_rest_as_between_steps(tmp_path):
    manifest = Manifest(str(tmp_path), "run")
    timeline.record(manifest, "pre_copy_round", T0, T0 + 30, round=1)  # before the window: not a window step
    timeline.record(manifest, "stop_connectors", T0 + 31, T0 + 32)
    timeline.record(manifest, "quiesce", T0 + 32.5, T0 + 35)
    timeline.record(manifest, "copy", T0 + 35, T0 + 37)
    timeline.record(manifest, "resume_connectors", T0 + 38, T0 + 38.5)
    timeline.record(manifest, "copy", T0 + 100, T0 + 101)  # a re-run after the window: not counted
    rows = timeline.window(manifest, at(31), at(38.5))
    assert [(r["step"], r["seconds"]) for r in rows] == [
        ("stop_connectors", 1.0), ("quiesce", 2.5), ("copy", 2.0), ("resume_connectors", 0.5), ("between steps", 1.5)]
    assert timeline.window(manifest, at(31), None) == []  # not resumed: no window yet
    assert [r["step"] for r in timeline.steps(manifest)][:2] == ["pre_copy_round", "stop_connectors"]


def test_overlapping_steps_count_each_second_of_the_window_once(tmp_path):
    manifest = Manifest(str(tmp_path), "run")
    timeline.record(manifest, "stop_connectors", T0, T0 + 1)
    timeline.record(manifest, "quiesce", T0 + 0.1, T0 + 2.2)  # sampling while the connectors stop
    timeline.record(manifest, "snapshot", T0 + 2.3, T0 + 2.5)
    rows = timeline.window(manifest, at(0), at(3))
    assert rows[-1] == {"step": "between steps", "seconds": 0.6, "started": None}  # 0.1 + 0.5, not 3 - 3.3


def test_a_failed_step_records_nothing(tmp_path):
    manifest = Manifest(str(tmp_path), "run")
    with pytest.raises(RuntimeError), timeline.timed(manifest, "snapshot"):
        raise RuntimeError("broker down")
    assert timeline.steps(manifest) == []
    with timeline.timed(manifest, "snapshot") as details:
        details["topics"] = 3
    assert [(r["step"], r["topics"]) for r in timeline.steps(manifest)] == [("snapshot", 3)]


@pytest.mark.parametrize("row, covered", [
    # verified while live up to 900, the rest (with the seam's last offsets read again) in the window
    ({"equal": True, "source_log_start": 100, "snapshot_end": 1000, "verified_live": [100, 900, "t"],
      "verified_in_window": [800, 1000]}, (900, 900)),
    # retention moved the log start past the live range's start: what is left counts
    ({"equal": True, "source_log_start": 500, "snapshot_end": 1000, "verified_live": [500, 900, "t"],
      "verified_in_window": [800, 1000]}, (500, 500)),
    ({"equal": True, "source_log_start": 0, "snapshot_end": 1000, "verified_in_window": [0, 1000]}, (1000, 1000)),
    ({"equal": False, "source_log_start": 0, "snapshot_end": 1000, "verified_in_window": [0, 1000]}, (0, 1000)),
    # a gap between the live range and the window's would not count as verified
    ({"equal": True, "source_log_start": 0, "snapshot_end": 1000, "verified_live": [0, 400, "t"],
      "verified_in_window": [600, 1000]}, (800, 1000)),
])
def test_verified_coverage_counts_each_offset_once(row, covered):
    assert _covered(row) == covered


def test_a_run_name_names_one_request(tmp_path):
    manifest = Manifest(str(tmp_path), "move-orders")
    params = {"topics_include": "orders", "quiesce_seconds": 10, "spark_connect_conn_id": "", "dry_run": False}
    check_request(manifest, params)  # nothing recorded yet: fine
    record_request(manifest, params)
    record_request(manifest, {**params, "spark_connect_conn_id": "spark_connect_default", "dry_run": True})  # how
    record_request(manifest, {**params, "spark_remote": "sc://spark:15002"})  # the old name of that param too
    with pytest.raises(RunConflict, match=r"run 'move-orders' was started with other params \(quiesce_seconds: 10 "
                                          r"then, 2 now\).*choose a new run_name.*Nothing was done"):
        check_request(manifest, {**params, "quiesce_seconds": 2})
    assert manifest.read(Part.PARAMS)["params"]["quiesce_seconds"] == 10


def test_downtime_and_finished_come_from_the_events(tmp_path):
    manifest = Manifest(str(tmp_path), "run")
    assert not events.finished(manifest) and events.downtime_s(manifest) is None
    manifest.write_once(Part.event(events.STOPPED), {"at": at(0)})
    manifest.write_once(Part.event(events.RESUMED), {"at": at(7.25)})
    assert events.finished(manifest) and events.downtime_s(manifest) == 7.25


def scheduled_sensor(tmp_path, ahead_s: float):
    """The cutover sensor with a 10 s poke interval, and the context of a poke of a run (pre-copy on)
    whose cutover_at is `ahead_s` from now."""
    import datetime

    from kmigrate_airflow.operators import KmigrateCutoverSensor
    at = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=ahead_s)
    params = {"cutover_at": at.isoformat(), "pre_copy": True, "state_location": str(tmp_path), "run_name": "r",
              "source_kafka_conn_id": "s", "target_kafka_conn_id": "t"}
    sensor = KmigrateCutoverSensor(task_id="wait", application="catch_up.py", poke_interval=10)
    return sensor, {"params": params, "run_id": "manual__2026"}, at


def test_no_catch_up_round_starts_nearer_the_cutover_time_than_a_round_has_taken(tmp_path, monkeypatch):
    """A round that would end after cutover_at holds the stop back: the sensor waits for the time instead."""
    import datetime
    import time

    from kmigrate_airflow.operators import CATCH_UP_STEP
    rounds: list = []
    manifest = Manifest(str(tmp_path), "r")
    sensor, context, at = scheduled_sensor(tmp_path, 30)
    monkeypatch.setattr(sensor, "_catch_up", lambda request: rounds.append("round without a pre-copy"))
    off = {**context, "params": {**context["params"], "pre_copy": False}}
    assert sensor.poke(off) is False and rounds == []  # the pre-copy off: no round, the time awaited
    monkeypatch.setattr(sensor, "_catch_up", lambda request: rounds.append(sensor.catch_up_job(request)))
    assert sensor.poke(context) is False and len(rounds) == 1  # 30 s ahead: a round, then the next poke
    # the round's job: the run's, on its clusters, as the request names them
    assert (rounds[0].application_args, rounds[0].source_conn_id, rounds[0].target_conn_id) == (
        ["--state-location", str(tmp_path), "--run-id", "r", "--parallelism", "0"], "s", "t")
    assert [r["step"] for r in timeline.steps(manifest)] == [CATCH_UP_STEP]  # the round, timed
    now = time.time()
    timeline.record(manifest, CATCH_UP_STEP, now - 20, now - 8)  # a round took 12 s
    sensor, context, at = scheduled_sensor(tmp_path, 1.5)
    monkeypatch.setattr(sensor, "_catch_up", lambda request: rounds.append("late round"))
    assert sensor.poke(context) is True and len(rounds) == 1  # 1.5 s ahead: no round, the time awaited
    assert datetime.datetime.now(datetime.timezone.utc) >= at


def test_the_windows_course_is_the_librarys_order_with_a_failovers_stop_of_the_mirror_after_the_snapshot(tmp_path):
    from kmigrate.run.cutover import course

    calls = {name: (lambda name=name: ran.append(name)) for name in course.STEPS}
    shape = [item[0] if isinstance(item[0], str) else [n for n, _ in item] for item in course.window_course(calls)]
    assert shape == ["stop_connectors", "quiesce", "snapshot", "copy_and_verify",
                     ["restore_topic_configs", "migrate_acls", "replicate_groups", "migrate_connectors"],
                     "resume_connectors"]
    ran: list[str] = []
    manifest = Manifest(str(tmp_path), "failover")
    manifest.write_once(course.done_part("stop_connectors"), {"step": "stop_connectors", "ended": "earlier"})
    done = course.run_course(manifest, course.window_course(calls, lambda: ran.append("stop_mirror")), lambda _: None)
    assert done == list(course.FAILOVER_STEPS[1:])  # a retry continues at the first step not done
    assert ran[:4] == ["quiesce", "snapshot", "stop_mirror", "copy_and_verify"] and ran[-1] == "resume_connectors"
    assert sorted(ran[4:8]) == sorted(course.STEPS[4:8])  # side by side
