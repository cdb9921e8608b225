"""The mirror's rounds (kmigrate.run.mirror.driver) with the copier run in this process, on the real
stack: records the source deletes past what the mirror copied are followed (the DR cluster's log
start moves with the source's), by the mirror that copied them and by one started again, which
knows its own records from the run's status; a DR topic holding records of its own stays refused;
a long term's tasks report what they verified and what failed while it runs."""
from __future__ import annotations

import re
import threading

from kmigrate.copy.options import CopyOptions
from kmigrate.copy.partition import copy_partition
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.manifest import Manifest
from kmigrate.model import WorkUnit
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror.driver import VERIFIED, Mirror
from kmigrate.run.mirror.spec import MirrorSpec

from tests.support.kafka import create_topic, produce, watermarks
from tests.support.migration import assert_same_partition
from tests.support.waiting import wait_until


def mirror_of(stack, manifest: Manifest, topic: str) -> Mirror:
    """A mirror whose terms are followed in this process."""
    return Mirror(manifest, stack.source, stack.target, MirrorSpec(re.escape(topic)), say=lambda _: None)


def records(n: int, tag: str) -> list[tuple[bytes, bytes]]:
    return [(f"k{i}".encode(), f"{tag} {i}".encode()) for i in range(n)]


def mirrored_once(stack, topic: str, tmp_path) -> tuple[Manifest, Mirror]:
    """100 records on a new one-partition topic, and a mirror of it after its first round."""
    create_topic(stack.source, topic, 1)
    produce(stack.source, topic, records(100, "first"), 0)
    manifest = Manifest(str(tmp_path), "mirror")
    mirror = mirror_of(stack, manifest, topic)
    mirror.round()
    assert watermarks(stack.target, topic) == (0, 100)
    return manifest, mirror


def test_records_the_source_deletes_past_the_mirrors_end_are_followed_across_a_restart(stack, unique_name, tmp_path):
    topic = unique_name
    manifest, mirror = mirrored_once(stack, topic, tmp_path)

    produce(stack.source, topic, records(50, "second"), 0)
    with ClusterAdmin(stack.source) as admin:
        admin.delete_records(topic, 0, 140)  # past the DR cluster's end: records 100-139 never reach it
    status = mirror.round()
    assert status["failed_partitions"] == 0 and watermarks(stack.target, topic) == (140, 150)
    assert_same_partition(stack, topic, 0)

    produce(stack.source, topic, records(10, "third"), 0)
    with ClusterAdmin(stack.source) as admin:
        admin.delete_records(topic, 0, 155)
    again = mirror_of(stack, manifest, topic)  # a restarted mirror: its own ends from the run's status
    assert again.own_ends == {(topic, 0): 150}
    status = again.round()
    assert status["failed_partitions"] == 0 and status["round"] == 3
    assert_same_partition(stack, topic, 0)
    assert mirror_status.read(manifest)["partitions"][0]["own_end"] == 160


def with_records_of_its_own(stack, topic: str) -> None:
    """A topic whose DR copy holds 5 records of its own, and whose source's log start (10) lies past
    them: the mirror must refuse it, as it cannot tell them from its own."""
    create_topic(stack.source, topic, 1)
    create_topic(stack.target, topic, 1)
    produce(stack.target, topic, records(5, "the DR cluster's own"), 0)
    produce(stack.source, topic, records(20, "source"), 0)
    with ClusterAdmin(stack.source) as admin:
        admin.delete_records(topic, 0, 10)


def test_a_dr_topic_with_records_of_its_own_is_refused_and_named(stack, unique_name, tmp_path):
    topic = unique_name
    with_records_of_its_own(stack, topic)
    status = mirror_of(stack, Manifest(str(tmp_path), "mirror"), topic).round()
    [row] = status["partitions"]
    assert status["failed_partitions"] == 1 and "did not write" in row["error"] and row["own_end"] is None
    assert watermarks(stack.target, topic) == (0, 5)  # nothing written


def test_records_a_copy_wrote_without_reporting_them_count_as_the_mirrors_own_across_a_restart(
        stack, unique_name, tmp_path):
    """A copy that wrote and was killed before its row came back (a task killed after its writes, or
    the driver killed while its Spark job went on): the next copy, in this mirror or a restarted one,
    knows those records as the mirror's own when the source has since deleted past them."""
    topic = unique_name
    manifest, mirror = mirrored_once(stack, topic, tmp_path)
    produce(stack.source, topic, records(50, "second"), 0)
    copy_term = mirror.copy_term

    def killed_after_writing(units, extras, term):
        copy_term(units, extras, term)
        return [{"ok": False, "topic": u.topic, "partition": u.partition, "error": "the task was killed", "records": 0,
                 "own_end": None, "verified": None} for u in units]

    mirror.copy_term = killed_after_writing
    status = mirror.round()
    [row] = status["partitions"]  # written, not reported: still asked of the mirror's copy
    assert mirror.errors and row["own_end"] == 100 and row["asked"] and watermarks(stack.target, topic) == (0, 150)
    produce(stack.source, topic, records(20, "third"), 0)
    with ClusterAdmin(stack.source) as admin:
        admin.delete_records(topic, 0, 160)  # the source deletes past what the unreported copy wrote
    again = mirror_of(stack, manifest, topic)  # a restart: what was asked of the copy, from the run's status
    status = again.round()
    assert status["failed_partitions"] == 0 and watermarks(stack.target, topic) == (160, 170)
    assert_same_partition(stack, topic, 0)


def test_records_a_copy_of_the_term_before_wrote_after_the_driver_read_the_dr_ends_are_the_mirrors_own(
        stack, unique_name, tmp_path):
    """A task of the term before (its driver killed, or not yet told that the term ended) copies after
    the driver read the DR ends for the next term: the next term's copy, holding the partition's lease,
    knows those records as the mirror's own when the source has since deleted past them."""
    topic = unique_name
    manifest, mirror = mirrored_once(stack, topic, tmp_path)
    produce(stack.source, topic, records(50, "second"), 0)
    copy_term = mirror.copy_term

    def copied_late_by_the_term_before(units, extras, term):
        late = copy_partition(stack.source, stack.target, WorkUnit(topic, 0, 150),
                              CopyOptions(run_id=manifest.run_id, verify=False, live=True))
        assert late.target_end == 150 and extras[(topic, 0)]["own_end"] == 100  # the driver knows none of it
        produce(stack.source, topic, records(20, "third"), 0)
        with ClusterAdmin(stack.source) as admin:
            admin.delete_records(topic, 0, 160)  # past what the late copy wrote
        return copy_term(units, extras, term)

    mirror.copy_term = copied_late_by_the_term_before
    status = mirror.round()
    assert status["failed_partitions"] == 0, status["partitions"]
    assert watermarks(stack.target, topic) == (160, 170)
    assert_same_partition(stack, topic, 0)


def test_a_long_terms_tasks_report_their_verifications_and_failures_while_it_runs(stack, unique_name, tmp_path,
                                                                                  monkeypatch):
    good, bad = f"{unique_name}-good", f"{unique_name}-bad"
    create_topic(stack.source, good, 1)
    with_records_of_its_own(stack, bad)
    produce(stack.source, good, records(100, "first"), 0)
    manifest = Manifest(str(tmp_path), "mirror")
    monkeypatch.setattr(Mirror, "REPORTS_EVERY_S", 0.3)
    mirror = Mirror(manifest, stack.source, stack.target,
                    MirrorSpec(f"{re.escape(unique_name)}-.*", interval_s=0.2, verify_every_s=0.5, term_s=3600),
                    say=lambda _: None)
    stopping = threading.Event()
    driver = threading.Thread(target=mirror.run, args=(stopping.is_set,), daemon=True)
    driver.start()

    def verified_to(end: int):
        rows = {r["topic"]: r for r in (manifest.read(VERIFIED) or {}).get("rows", [])}
        return rows.get(good, {}).get("to") == end and rows[good]

    try:
        assert wait_until(lambda: verified_to(100), "the first 100 records verified while the term runs", 60)["equal"]
        produce(stack.source, good, records(50, "second"), 0)
        assert wait_until(lambda: verified_to(150), "the next 50 verified in the same term", 60)["records"] == 150
        status = wait_until(lambda: (s := mirror_status.read(manifest))["failed_partitions"] and s,
                            "the refused partition named while the term runs", 60)
        assert status["term"] == 1 and status["totals"]["terms"] == 0  # the term has not ended
        assert "did not write" in next(p["error"] for p in status["partitions"] if p["topic"] == bad)
    finally:
        stopping.set()
        driver.join(60)
    assert not driver.is_alive()
    assert watermarks(stack.target, bad) == (0, 5)  # nothing written there
