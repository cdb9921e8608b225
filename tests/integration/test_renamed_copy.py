"""A topic copied under another name on the target (a run's renames, issue 67): every partition's
records at their source offsets in the renamed topic, verified there, the source's name never
created on the target, and a re-run a no-op. Each copy path: a task's partitions (copied together
where they qualify, else one by one, whole batches), record by record, and translate mode."""
from __future__ import annotations

import pytest
from kmigrate.copy.partition import copy_partition
from kmigrate.copy.writer import CopyOptions
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.model import TRANSLATE
from kmigrate.run.copying.plan import build_plan, work_units
from kmigrate.run.copying.tasks import copy_bin, verify_bin, verify_task
from kmigrate.run.targets.prepare import prepare_targets

from tests.support.kafka import TxnSeeder, all_watermarks, records_of, seed_plain


def seed(stack, topic: str) -> None:
    """3 partitions: 0 plain records then committed and aborted transactions, 1 a log start at 100
    (DeleteRecords), 2 plain records only (copied together with the task's others where it can)."""
    seed_plain(stack.source, topic, partitions=3, per_partition=300)
    txn = TxnSeeder(stack.source, topic)
    txn.end = 300
    txn.transaction(3, "b", commit=True)
    txn.records(2, "d")
    txn.transaction(4, "c", commit=False)
    txn.records(5, "e")
    with ClusterAdmin(stack.source) as admin:
        assert admin.delete_records(topic, 1, 100) == 100


@pytest.mark.parametrize("path", ["task", "records", "translate"])
def test_a_renamed_topic_is_copied_and_verified_under_its_target_name_only(stack, unique_name, source_untouched, path):
    topic, renamed = unique_name, f"renamed.{unique_name}"
    seed(stack, topic)
    source_untouched(topic)
    clients = (stack.source, stack.target)
    modes = {topic: TRANSLATE} if path == "translate" else None
    units = work_units(build_plan(stack.source, [topic], modes, target_names={topic: renamed}))
    assert {u.target_topic for u in units} == {renamed}
    prepare_targets(*clients, units)

    def copy() -> list[dict]:
        if path == "task":
            return copy_bin([(u, {}) for u in units], clients, f"run-{unique_name}")
        options = CopyOptions(run_id=f"run-{unique_name}", raw_batches=False)
        return [{"ok": True, **copy_partition(*clients, u, options).as_row()} for u in units]

    rows = copy()
    assert all(r["ok"] and r["target_topic"] == renamed and r["topic"] == topic for r in rows), rows
    if path == "translate":
        maps = {r["partition"]: r["offset_map"] for r in rows}
        verified = [verify_task(u, clients, offset_map=maps[u.partition]) for u in units]
    else:
        verified = verify_bin([(u, {}) for u in units], clients)
    assert all(v["equal"] and v["target_topic"] == renamed for v in verified), verified

    with ClusterAdmin(stack.target) as admin:
        assert admin.partition_count(topic) is None, "the source's name was created on the target"
    for partition in range(3):
        on_source = records_of(stack.source, topic, partition)
        on_target = records_of(stack.target, renamed, partition)
        if path == "translate":  # dense on the target: the same records in the same order
            assert [r[1:] for r in on_target] == [r[1:] for r in on_source]
        else:
            assert on_target == on_source
    if path != "translate":
        assert all_watermarks(stack.target, renamed) == all_watermarks(stack.source, topic)
        again = copy()  # resumed from the renamed topic's end: nothing left to write
        assert all(r["ok"] and r["records"] == 0 for r in again), again
