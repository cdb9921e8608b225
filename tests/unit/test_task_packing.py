"""Work units packed into Spark tasks: every unit once, tasks balanced and bounded, and what a task
carries (its closure and its own units) does not grow with the plan. Plans of thousands of units
are built, stored and read back quickly."""
from __future__ import annotations

import functools
import json
import time

import pytest
from kmigrate.config import ClusterConfig
from kmigrate.manifest import Manifest, Part
from kmigrate.model import OffsetRun, WorkUnit
from kmigrate.run.copying.plan import plan_from_topics, read_plan, work_units
from kmigrate.run.copying.tasks import copy_extras, copy_task, verify_extras, verify_task
from kmigrate_spark import units as spark_units
from kmigrate_spark.adapters import bin_json, by_bin, indexed, run_bin
from pyspark import cloudpickle


@pytest.mark.parametrize("n, slots", [(1, 2), (5, 2), (24, 2), (500, 2), (5000, 2), (5000, 8)])
def test_every_unit_lands_in_one_task_and_tasks_are_bounded(n, slots):
    weights = [1000 + (i * 7919) % 5000 for i in range(n)]
    bins = spark_units.pack(weights, slots)
    assert sorted(i for b in bins for i in b) == list(range(n))
    assert len(bins) == min(n, max(2 * slots, -(-n // spark_units.MAX_UNITS_PER_TASK)))
    totals = [sum(weights[i] for i in b) for b in bins]
    assert totals == sorted(totals, reverse=True)  # heaviest first
    assert max(totals) - min(totals) <= max(weights)  # balanced to within one unit
    if n >= 500:
        assert max(len(b) for b in bins) <= spark_units.MAX_UNITS_PER_TASK + 2


def test_a_large_partition_gets_a_task_of_its_own():
    bins = spark_units.pack([10_000_000] + [1000] * 20, slots=2)
    assert bins[0] == [0]


def _plan(n: int) -> list[WorkUnit]:
    topics = {f"topic-{t:04d}": {"partitions": [{"partition": p, "log_start": 0, "end": 100 + p}
                                               for p in range(50)]} for t in range(n // 50)}
    return work_units(plan_from_topics(topics))


CLIENTS = (ClusterConfig.from_bootstrap("source", "s:9092"), ClusterConfig.from_bootstrap("target", "t:9092"))


def _largest_task_bytes(units: list[WorkUnit], task, extras, slots: int = 2) -> tuple[int, int]:
    """(pickled size of the largest RDD task: its function and its items; the largest Spark Connect
    row: its items' JSON) for `units` packed as the copy job packs them."""
    bins = spark_units.pack([u.end_offset + spark_units.UNIT_WEIGHT for u in units], slots)
    items = [[(i, units[i], extras(units[i])) for i in b] for b in bins]
    function = cloudpickle.dumps(functools.partial(indexed, task=task, rows=None))
    return (len(function) + max(len(cloudpickle.dumps(b)) for b in items),
            max(len(bin_json(b)) for b in items) + len(cloudpickle.dumps(functools.partial(by_bin, task=task))))


def test_what_a_task_carries_does_not_grow_with_the_plan():
    # both past the cap on a task's units, the larger ten times the smaller
    small, large = _plan(2500), _plan(25_000)
    keys = [(u.topic, u.partition) for u in large]
    resume = {k: [OffsetRun(0, 0, 100)] for k in keys[::3]}  # translate-mode maps of a third of them
    ends = dict.fromkeys(keys, 100)
    live = {k: {"topic": k[0], "partition": k[1], "equal": True, "verified_live": [0, 100]} for k in keys}
    copy = functools.partial(copy_task, clients=CLIENTS, run_id="scale")
    verify = functools.partial(verify_task, clients=CLIENTS)
    for task, extras in ((copy, copy_extras(resume, ends)), (verify, verify_extras(resume, live, {"topic-0001"}))):
        rdd_small, connect_small = _largest_task_bytes(small, task, extras)
        rdd_large, connect_large = _largest_task_bytes(large, task, extras)
        # ten times the plan: a task of the same bounded size (its own units only), not ten times larger
        assert rdd_large <= rdd_small * 1.25 and connect_large <= connect_small * 1.25, (
            rdd_small, rdd_large, connect_small, connect_large)
        assert max(rdd_large, connect_large) < spark_units.MAX_UNITS_PER_TASK * 256  # a few hundred bytes a unit


def test_a_task_runs_its_units_in_order_with_their_extras():
    seen = []

    def task(unit, **extras):
        seen.append((unit.partition if unit else None, extras))
        return {"partition": unit.partition if unit else None, **extras}

    units = [WorkUnit("t", p, 10 * p) for p in range(3)]
    items = [(7, units[2], {"own_end": 5}), (3, units[0], {})]
    assert run_bin(items, task) == [(7, {"partition": 2, "own_end": 5}), (3, {"partition": 0})]
    # the Spark Connect form: the same through JSON
    assert json.loads(by_bin(bin_json(items), task)) == [[7, {"partition": 2, "own_end": 5}], [3, {"partition": 0}]]
    assert run_bin([(0, None, {})], lambda unit: "ready") == [(0, "ready")]


def test_a_task_with_a_form_for_a_whole_bin_gets_the_bin_at_once():
    calls = []

    def one(unit, clients, **extras):
        raise AssertionError("the bin form runs the units")

    def whole(items, clients):
        calls.append([(unit.partition, extras) for unit, extras in items])
        return [{"partition": unit.partition, "clients": clients} for unit, _ in items]

    one.per_bin = whole
    units = [WorkUnit("t", p, 10) for p in range(3)]
    items = [(5, units[2], {"own_end": 1}), (1, units[0], {})]
    assert run_bin(items, functools.partial(one, clients="both")) == [
        (5, {"partition": 2, "clients": "both"}), (1, {"partition": 0, "clients": "both"})]
    assert calls == [[(2, {"own_end": 1}), (0, {})]]


def test_a_plan_of_5000_units_is_built_stored_and_read_back_in_under_5_s(tmp_path):
    topics = {f"topic-{t:04d}": {"partitions": [{"partition": p, "log_start": p, "end": 1000 + p} for p in range(50)]}
              for t in range(100)}
    started = time.monotonic()
    manifest = Manifest(str(tmp_path), "scale")
    manifest.write_once(Part.PLAN, plan_from_topics(topics))
    units = work_units(read_plan(Manifest(str(tmp_path), "scale")))
    elapsed = time.monotonic() - started
    assert len(units) == 5000 and elapsed < 5.0, elapsed


@pytest.mark.parametrize("slots, parallelism, shared, tasks", [
    (4, None, True, 2), (4, 0, False, 4), (1, 0, True, 1), (4, 3, True, 3), (4, 9, True, 4), (2, None, True, 1)])
def test_the_mirror_leaves_half_a_shared_servers_slots_unless_told(monkeypatch, slots, parallelism, shared, tasks):
    """Its tasks run for a whole term: on a Spark Connect server (shared) it takes half the slots by
    default, so that a drill's or a migration's job there gets the others."""
    from kmigrate_spark import mirror_job
    units = [WorkUnit(f"t{i % 3}", i, 0) for i in range(24)]
    seen: list[list] = []
    held: list[tuple[int, int]] = []

    def map_units(spark, bins, task):
        seen.extend(bins)
        return iter([(index, {"ok": True}) for b in bins for index, _, _ in b])

    monkeypatch.setattr(mirror_job, "task_slots", lambda spark: slots)
    monkeypatch.setattr(mirror_job, "is_connect", lambda spark: shared)
    monkeypatch.setattr(mirror_job, "describe_jobs", lambda spark, text: None)
    monkeypatch.setattr(mirror_job, "map_units", map_units)
    rows = mirror_job.copy_term_on_spark(object(), units, {(u.topic, u.partition): {} for u in units}, None,
                                         parallelism, lambda *told: held.append(told))
    assert len(seen) == tasks and sorted(i for b in seen for i, _, _ in b) == list(range(24))
    assert held == [(tasks, slots)] and all(r == {"ok": True} for r in rows)


def test_a_drill_is_refused_a_server_whose_every_slot_the_running_mirror_holds(tmp_path):
    from kmigrate.errors import ConfigError
    from kmigrate.run.mirror import status
    from kmigrate.run.mirror.drill import check_slots_left

    mirror = Manifest(str(tmp_path), "dr-mirror")
    check_slots_left(mirror, "sc://spark:15002")  # no mirror on a Spark Connect server
    mirror.replace(status.SPARK_PART, {"server": status.server_address("sc://spark:15002/;token=secret"),
                                       "tasks": 4, "slots": 4})
    assert "secret" not in json.dumps(mirror.read(status.SPARK_PART))
    check_slots_left(mirror, None)  # the drill's jobs under spark-submit
    check_slots_left(mirror, "sc://other:15002")
    with pytest.raises(ConfigError, match=r"holds all 4 task slots of the Spark Connect server sc://spark:15002.*"
                                          r"spark_parallelism below 4"):
        check_slots_left(mirror, "sc://spark:15002/;use_ssl=true")
    status.write(mirror, {"heartbeat": "x"}, stopped=True)  # a stopped mirror holds nothing
    check_slots_left(mirror, "sc://spark:15002")
    mirror.replace(status.SPARK_PART, {"server": "sc://spark:15002", "tasks": 2, "slots": 4})
    status.write(mirror, {"heartbeat": "x"})
    check_slots_left(mirror, "sc://spark:15002")
