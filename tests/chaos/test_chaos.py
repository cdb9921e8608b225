"""Seeded runs of the copy contract against a live source (tests/chaos/live_source.py): pre-copy rounds
at random moments while transactional, idempotent and plain producers write, records are deleted
and the cleaner compacts; then the cutover (quiesce, snapshot, final copy, verification). Every round
must succeed, and at the end every partition must equal the source (log start, end, every
read_committed record at its offset) and the model of what the producers were told.

The runs are the library's own steps in this process, as a Spark task runs them (copy_bin,
live_verify_task, verify_bin, pre_copy_rounds, quiesce_poke, take_snapshot): no Spark between the
steps, so that a seed takes seconds. `make test` runs seeds 0-4; `make test-chaos SEEDS=N` runs
N seeds and prints one JSON line (tests/chaos/summary.py). A seed that failed once is kept in
REGRESSION_SEEDS, with what it found."""
from __future__ import annotations

import os
import random
import time
import uuid

import pytest
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.manifest import Manifest, Part
from kmigrate.run.plan import (
    copied_ends,
    latest_copy_rows,
    read_plan,
    source_ends_now,
    translate_maps,
    units_to_copy,
    work_units,
    write_pre_copy_plan,
)
from kmigrate.run.precopy import live_rows, pre_copy_rounds
from kmigrate.run.quiesce import quiesce_poke
from kmigrate.run.snapshot import take_snapshot
from kmigrate.run.targets import prepare_targets
from kmigrate.run.tasks import copy_bin, copy_extras, key, live_verify_task, verify_bin, verify_extras

from tests import results
from tests.chaos.live_source import LiveSource, Model
from tests.integration.test_copier import records_of

RESULTS_ENV = "KMIGRATE_CHAOS_RESULTS"
SEEDS = int(os.environ.get("KMIGRATE_CHAOS_SEEDS", "5"))
FIRST_SEED = int(os.environ.get("KMIGRATE_CHAOS_FIRST_SEED", "0"))
# seeds that once failed, and what they found; each runs in every suite
REGRESSION_SEEDS: dict[int, str] = {}
QUIESCE_S = 2.0


def _seeds() -> list[int]:
    return sorted(set(range(FIRST_SEED, FIRST_SEED + SEEDS)) | set(REGRESSION_SEEDS))


@pytest.mark.parametrize("seed", _seeds())
def test_seeded_live_source(stack, tmp_path, seed):
    facts = {"seed": seed, "passed": False, "rounds": 0, "partitions_compared": 0, "records_compared": 0}
    try:
        facts.update(run_seed(stack, seed, tmp_path))
        facts["passed"] = True
    except BaseException as exc:
        facts["error"] = f"{type(exc).__name__}: {exc}"[:2000]
        raise
    finally:
        results.record(RESULTS_ENV, **facts)


def run_seed(stack, seed: int, state) -> dict:
    clients = (stack.source, stack.target)
    rng = random.Random(seed * 7919 + 1)
    live = LiveSource(stack.source, f"chaos{seed}-{uuid.uuid4().hex[:6]}", seed)
    live.create()
    run_id = live.prefix
    manifest = Manifest(str(state), run_id)
    topics = sorted(live.topics)

    def copy_round(units):
        todo, rows = units_to_copy(*clients, units, manifest)
        latest = latest_copy_rows(manifest)
        extras = copy_extras(translate_maps(manifest, latest), copied_ends(manifest, latest))
        rows += copy_bin([(u, extras(u)) for u in todo], clients, run_id, verify=False, live=True)
        manifest.write_once(Part.attempt(Part.COPY_RESULTS), {"rows": rows, "seconds": 0.0, "warm_up_seconds": 0.0})
        return rows

    def verify_round(units, previous):
        return [live_verify_task(u, clients, compacted=u.topic in live.compacted, previous=previous.get(key(u)))
                for u in units]

    live.start()
    try:
        time.sleep(rng.uniform(0.3, 1.0))  # the workload's own pace: data before the first round
        units = work_units(write_pre_copy_plan(manifest, stack.source, topics, {}))
        prepare_targets(*clients, units, manifest=manifest)
        for call in range(rng.randint(2, 4)):
            if call:
                units = source_ends_now(stack.source, units)  # a catch-up round, as while waiting for cutover_at
            units, failed = pre_copy_rounds(manifest, stack.source, units, copy_round, verify_round,
                                            max_rounds=rng.randint(1, 2), converged_records=0, say=lambda line: None)
            assert not failed, f"seed {seed}: a pre-copy round failed: {failed}"
            unequal = [r for r in live_rows(manifest).values() if not r["equal"]]
            assert not unequal, f"seed {seed}: verified unequal while live: {unequal}"
            time.sleep(rng.uniform(0.05, 1.2))  # the next round at a random moment
    finally:
        live.stop()

    deadline = time.monotonic() + 120
    while not quiesce_poke(manifest, stack.source, topics, QUIESCE_S, budget_s=10):
        assert time.monotonic() < deadline, f"seed {seed}: the source did not quiesce"
    take_snapshot(manifest, stack.source, topics_include=live.pattern)
    units = work_units(read_plan(manifest))
    todo, rows = units_to_copy(*clients, units, manifest, settle_copied=False)
    latest = latest_copy_rows(manifest)
    extras = copy_extras(translate_maps(manifest, latest), copied_ends(manifest, latest))
    rows += copy_bin([(u, extras(u)) for u in todo], clients, run_id, verify=True)
    failed = [r for r in rows if not r["ok"]]
    assert not failed, f"seed {seed}: the final copy failed: {failed}"
    manifest.write_once(Part.attempt(Part.COPY_RESULTS), {"rows": rows, "seconds": 0.0, "warm_up_seconds": 0.0})
    to_verify = verify_extras(translate_maps(manifest), live_rows(manifest), live.compacted)
    verified = verify_bin([(u, to_verify(u)) for u in units], clients)
    unequal = [r for r in verified if not r["equal"]]
    assert not unequal, f"seed {seed}: verification found differences: {unequal}"

    compared = compare_with_model(stack, live.topics, live.compacted, live.model)
    rounds = sum(1 for part in manifest.parts() if part.startswith(f"{Part.PRE_COPY_ROUNDS}/"))
    return {"rounds": rounds, "partitions_compared": len(units), "records_compared": compared,
            "transactions": live.model.transactions, "aborts": live.model.aborts,
            "lone_aborts": live.model.lone_aborts, "deletes": live.model.deletes}


def _view(cluster, topic: str, partition: int) -> dict[int, tuple]:
    return {offset: (k, v, tuple(h or ()), ts) for offset, k, v, h, ts in records_of(cluster, topic, partition)}


def compare_with_model(stack, topics: dict[str, int], compacted: set[str], model: Model) -> int:
    """Every partition: both sides' log start and end equal; the read_committed views equal (on a
    compacted topic: what the source holds is on the target, and what only the target holds is
    superseded there); and the target's view is what the producers were told: every record on it
    one they wrote at that offset and saw committed, every such record from the log start on there
    (on a compacted topic, the latest of each key). Returns the records compared."""
    compared = 0
    with ClusterAdmin(stack.source) as source, ClusterAdmin(stack.target) as target:
        for topic, count in topics.items():
            for partition in range(count):
                marks = source.watermarks_of([(topic, partition)])[(topic, partition)]
                assert target.watermarks_of([(topic, partition)])[(topic, partition)] == marks, f"{topic}[{partition}]"
                on_source, on_target = _view(stack.source, topic, partition), _view(stack.target, topic, partition)
                told = {o: r for o, r in model.visible.get((topic, partition), {}).items() if o >= marks[0]}
                where = f"{topic}[{partition}]"
                for offset, record in on_target.items():
                    assert told.get(offset) == record, f"{where}: target offset {offset} is not what a producer wrote there"
                if topic in compacted:
                    for offset, record in on_source.items():
                        assert on_target.get(offset) == record, f"{where}: source offset {offset} differs on the target"
                    later = {}
                    for offset in sorted(on_target):
                        later[on_target[offset][0]] = offset
                    for offset, record in on_target.items():
                        assert offset in on_source or later[record[0]] > offset, f"{where}: {offset} only on the target"
                    newest = {}
                    for offset in sorted(told):
                        newest[told[offset][0]] = offset
                    for name, offset in newest.items():
                        assert offset in on_target, f"{where}: the latest record of key {name!r} ({offset}) is missing"
                else:
                    assert on_target == on_source, f"{where}: the read_committed views differ"
                    assert set(on_target) == set(told), (
                        f"{where}: offsets the producers saw committed {sorted(set(told) - set(on_target))[:5]} missing, "
                        f"{sorted(set(on_target) - set(told))[:5]} not theirs")
                compared += len(on_target)
    return compared
