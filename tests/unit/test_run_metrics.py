"""The runs' metrics (kmigrate.run.report.metrics over kmigrate.run.report.progress), from run manifests
written as the steps write them: a run's phase, copy to go, steps, verification and recovery
figures; a running mirror left to its own metrics; a finished run read once; a run older than the
retention left out; a run that cannot be read left out without hiding the others."""
from __future__ import annotations

import time

from kmigrate.manifest import Manifest, Part
from kmigrate.run.report.metrics import read_progress, render, run_families
from kmigrate.run.mirror import completion
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror.failover import PLANNED
from kmigrate.run.mirror.promote import UNPLANNED
from kmigrate.run.mirror.term import request_stop
from kmigrate.run.records import events, timeline
from kmigrate.run.report import progress


def _samples(text):
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if not line.startswith("#")}


def _run(state, name, *, at: float, finished: bool = False) -> Manifest:
    manifest = Manifest(str(state), name)
    manifest.write_once(Part.PARAMS, {"params": {"run_name": name}})
    timeline.record(manifest, "snapshot", at - 3, at - 2)
    timeline.record(manifest, "copy", at - 2, at - 1, partitions=4)
    manifest.replace(Part.COPY_PROGRESS, {"at": at, "began": at - 2, "partitions": 4, "partitions_to_go": 1,
                                          "offsets_to_go": 120, "offsets_per_s": 5000.0})
    manifest.write_once(Part.attempt(Part.VERIFICATION), {"rows": [{"equal": True}, {"equal": False}]})
    if finished:
        manifest.put_file(progress.REPORT, b"# report\n")
    return manifest


def test_a_runs_progress_becomes_samples(tmp_path):
    now = time.time()
    manifest = _run(tmp_path, "mig", at=now)
    manifest.write_once(Part.event(events.STOPPED), {"at": timeline.iso(now - 10)})
    manifest.write_once(Part.DRILL, {"rpo_records": 3, "rpo_seconds": 1.5, "rto_seconds": 42.0, "measured_at": "x"})
    s = _samples(render(run_families(read_progress(str(tmp_path), {}))))
    r = 'run="mig"'
    assert s[f"kmigrate_run_finished{{{r}}}"] == 0
    assert abs(s[f"kmigrate_run_progress_timestamp_seconds{{{r}}}"] - now) < 0.01  # the copy's progress, newest
    assert s[f'kmigrate_run_phase{{{r},phase="copy"}}'] == 1
    assert s[f'kmigrate_run_step_seconds{{{r},step="snapshot"}}'] == 1.0
    assert s[f"kmigrate_run_copy_partitions_to_go{{{r}}}"] == 1 and s[f"kmigrate_run_copy_offsets_to_go{{{r}}}"] == 120
    assert s[f"kmigrate_run_copy_offsets_per_second{{{r}}}"] == 5000
    assert s[f"kmigrate_run_verified_partitions{{{r}}}"] == 2 and s[f"kmigrate_run_unequal_partitions{{{r}}}"] == 1
    assert s[f"kmigrate_run_rpo_records{{{r}}}"] == 3 and s[f"kmigrate_run_rto_seconds{{{r}}}"] == 42
    assert f"kmigrate_run_downtime_seconds{{{r}}}" not in s  # not resumed yet


def test_an_unplanned_failovers_rpo_and_rto_and_a_scheduled_window(tmp_path):
    manifest = _run(tmp_path, "fo", at=time.time())
    manifest.replace(Part.PARAMS, {"params": {"cutover_at": "2030-01-01T00:00:00+00:00"}})
    manifest.write_once(Part.PROMOTED, {"behind_records": 9, "behind_s_max": 0.7, "seconds": 4.2})
    s = _samples(render(run_families(read_progress(str(tmp_path), {}))))
    assert s['kmigrate_run_rpo_records{run="fo"}'] == 9 and s['kmigrate_run_rpo_seconds{run="fo"}'] == 0.7
    assert s['kmigrate_run_rto_seconds{run="fo"}'] == 4.2
    assert s['kmigrate_run_cutover_timestamp_seconds{run="fo"}'] == 1893456000
    # one recorded before zones were required: UTC, as the run's request reads it (kmigrate.run.checks.schedule)
    manifest.replace(Part.PARAMS, {"params": {"cutover_at": "2030-01-01T00:00:00"}})
    assert progress.of_run(manifest)["cutover_at"] == 1893456000


def test_a_running_mirror_is_left_to_its_own_metrics_and_a_stopped_one_is_a_run(tmp_path):
    manifest = _run(tmp_path, "dr", at=time.time())
    status = {"round": 1, "heartbeat": timeline.iso(time.time()), "partitions": []}
    mirror_status.write(manifest, status)
    assert read_progress(str(tmp_path), {}) == []
    mirror_status.write(manifest, status, stopped=True)
    assert [run for run, _ in read_progress(str(tmp_path), {})] == ["dr"]


def test_a_finished_run_is_read_once_and_an_old_run_is_left_out(tmp_path):
    now = time.time()
    _run(tmp_path, "done", at=now, finished=True)
    _run(tmp_path, "old", at=now - 2 * 86_400)
    known: dict = {}
    assert [(run, p["finished"]) for run, p in read_progress(str(tmp_path), known)] == [("done", True)]
    assert set(known) == {"done"}  # the unfinished old run is read again at each scrape: it may move on
    known["done"] = {**known["done"], "phase": "read from memory"}
    [(_, again)] = read_progress(str(tmp_path), known)
    assert again["phase"] == "read from memory"
    assert [run for run, _ in read_progress(str(tmp_path), {}, retention_s=3 * 86_400)] == ["done", "old"]


def test_a_run_that_cannot_be_read_is_left_out_and_the_others_are_served(tmp_path, caplog):
    _run(tmp_path, "good", at=time.time())
    broken = _run(tmp_path, "broken", at=time.time())
    (tmp_path / "broken" / f"{Part.COPY_PROGRESS}.json").write_text("{\"at\": 1")  # cut short by a crash
    (tmp_path / "not a run").mkdir()
    Manifest(str(tmp_path), "refused").write_once(Part.PARAMS, {"params": {}})  # refused at its preflight
    assert [run for run, _ in read_progress(str(tmp_path), {})] == ["good"]
    assert "run broken" in caplog.text and broken.location in caplog.text


def test_the_runs_families_are_served_when_there_is_no_run():
    names = {f.name for f in run_families([])}
    assert {"kmigrate_run_finished", "kmigrate_run_progress_timestamp_seconds", "kmigrate_run_phase",
            "kmigrate_run_rpo_records"} <= names


def test_a_mirror_stopped_by_its_last_move_or_a_user_is_finished_and_one_stopped_by_a_failover_is_not(tmp_path):
    status = {"round": 1, "heartbeat": timeline.iso(time.time() - 3600), "partitions": []}
    for run, why in (("ended", completion.WHY), ("by-hand", "the operator is done"), ("planned", PLANNED),
                     ("unplanned", UNPLANNED)):
        manifest = _run(tmp_path, run, at=time.time() - 3600)
        mirror_status.write(manifest, status, stopped=True)
        request_stop(manifest, why)
    finished = {run: p["finished"] for run, p in read_progress(str(tmp_path), {})}
    # a failover's run finishes with its report: until then, an hour without progress is a stuck run
    assert finished == {"ended": True, "by-hand": True, "planned": False, "unplanned": False}


def test_an_abandoned_run_and_an_unreadable_folder_are_read_again_an_hour_later_only(tmp_path, monkeypatch):
    now = time.time()
    _run(tmp_path, "abandoned", at=now - 2 * 86_400)
    (tmp_path / "not a run").mkdir()
    reads = []
    real = progress.of_run
    monkeypatch.setattr(progress, "of_run", lambda manifest: reads.append(manifest.run_id) or real(manifest))
    resting: dict = {}
    assert read_progress(str(tmp_path), {}, now=now, resting=resting) == []
    assert read_progress(str(tmp_path), {}, now=now + 60, resting=resting) == []
    assert reads == ["abandoned"] and set(resting) == {"abandoned", "not a run"}  # read once in the minute
    assert read_progress(str(tmp_path), {}, now=now + 3_601, resting=resting) == []
    assert reads == ["abandoned", "abandoned"]
