"""The rule every reader of the claims log applies (kmigrate.claims.state.Claims): which appended claim
takes effect, in log order."""
from __future__ import annotations

import copy
import json
import os
import random

import pytest
from kmigrate.claims import leases
from kmigrate.claims import log as claims_log
from kmigrate.claims import runs as claims_runs
from kmigrate.claims.state import LEASED_KEPT_MS, Claims


def run_claim(run: str, *topics: str, dag: str = "kafka_migration") -> dict:
    return {"kind": "run", "run": run, "topics": list(topics), "dag": dag, "host": "h"}


def lease(holder: str, scope: str = "t:0", lease_ms: int = 30_000, **extra) -> dict:
    return {"kind": "lease", "scope": scope, "holder": holder, "run": "r", "lease_ms": lease_ms, **extra}


def test_the_first_run_to_claim_a_topic_holds_it_and_a_second_is_void_until_release():
    state = Claims()
    assert state.apply(1, run_claim("a", "orders", "payments"))
    assert not state.apply(2, run_claim("b", "payments", "audit"))
    assert state.conflicts("b", ["payments", "audit"]) == {"a": ["payments"]}
    assert "b" not in state.runs
    assert state.apply(3, run_claim("b", "audit"))  # disjoint topics: both hold theirs
    assert state.apply(4, {"kind": "run-release", "run": "a"})
    assert not state.apply(5, {"kind": "run-release", "run": "a"})  # released already
    assert state.apply(6, run_claim("b", "payments"))
    assert state.runs["b"]["topics"] == ["audit", "payments"]


def test_a_run_claiming_again_keeps_its_topics_and_adds_free_ones():
    state = Claims()
    assert state.apply(1, run_claim("a", "orders"))
    assert state.apply(2, run_claim("a", "orders"))
    assert state.apply(3, run_claim("a", "audit"))
    assert state.runs["a"]["topics"] == ["audit", "orders"]


def test_a_lease_is_void_while_another_holder_renews_it_and_takes_effect_when_it_runs_out():
    state = Claims()
    assert state.apply(1_000, lease("x"))
    assert not state.apply(2_000, lease("y"))
    assert state.apply(20_000, lease("x"))            # renewal
    assert not state.apply(50_000, lease("y"))        # 30 s after the renewal: still held
    assert state.apply(50_001, lease("y"))            # run out
    assert not state.apply(50_002, lease("x"))        # the old holder's renewal comes too late
    assert state.parts["t:0"]["holder"] == "y"
    assert state.apply(50_003, lease("z", scope="t:1"))  # another partition: independent


def test_a_lease_is_taken_over_at_once_only_by_naming_its_current_holder_as_gone():
    state = Claims()
    assert state.apply(1_000, lease("x"))
    assert not state.apply(2_000, lease("y", breaks="w"))  # names another holder: void
    assert state.apply(2_001, lease("y", breaks="x"))
    assert state.parts["t:0"]["holder"] == "y"


def test_only_the_holder_releases_a_lease():
    state = Claims()
    assert state.apply(1, lease("x"))
    assert not state.apply(2, {"kind": "lease-release", "scope": "t:0", "holder": "y"})
    assert state.apply(3, {"kind": "lease-release", "scope": "t:0", "holder": "x"})
    assert state.apply(4, lease("y"))


def test_records_of_unknown_kinds_or_shapes_change_nothing():
    state = Claims()
    assert not state.apply(1, {"kind": "from-a-later-version", "run": "a"})
    assert not state.apply(2, {})
    assert not state.apply(3, ["not", "a", "claim"])
    assert not state.apply(4, {"kind": "run", "run": "a"})                 # no topics
    assert not state.apply(5, {"kind": "run", "run": "a", "topics": "orders"})  # not a list
    assert not state.apply(6, {"kind": "lease", "scope": "t:0", "holder": "x"})  # no lease length
    assert not state.apply(7, {"kind": "run", "run": ["a"], "topics": ["orders"]})  # a run is named by a string
    assert not state.apply(8, {"kind": "lease", "scope": "t:0", "holder": None, "lease_ms": 1})  # holders compared
    assert state.runs == {} and state.parts == {}
    assert state.apply(9, run_claim("a", "orders"))  # and the fold goes on


def test_a_record_value_is_a_claim_only_when_it_is_a_json_object():
    assert claims_log._claim_of(b'{"kind": "run"}') == {"kind": "run"}
    for value in (None, b"", b"not json", b"\xff\xfe", b"[1, 2]", b"null", b'"text"', b"42"):
        assert claims_log._claim_of(value) is None, value
    assert claims_log._what(None) == "no value: a tombstone"
    assert claims_log._what(b"x" * 100).endswith("...")


def test_the_refusal_names_the_holding_run_its_dag_and_the_way_out():
    state = Claims()
    state.apply(1_700_000_000_000, run_claim("nightly-move", "orders", dag="kafka_dr_drill"))
    exc = claims_runs._held_error("second", state.conflicts("second", ["orders", "audit"]), state)
    text = str(exc)
    assert "run 'nightly-move' of DAG 'kafka_dr_drill'" in text and "holds orders" in text
    assert "python -m kmigrate.claims release nightly-move" in text
    assert exc.holders == ["nightly-move"]


def test_a_holder_is_known_gone_only_on_its_own_host():
    me = {"host": leases.socket.gethostname(), "pid": os.getpid(), "started": leases._started(os.getpid())}
    assert leases._started(os.getpid()) is not None
    assert not leases._gone(me)
    assert leases._gone({**me, "started": "0"})          # the process id was reused by another process
    assert not leases._gone({**me, "host": "elsewhere", "started": "0"})  # cannot tell from here


def random_claims(rng: random.Random, count: int) -> list[tuple[int, dict]]:
    """(broker time, record) of `count` random claims: runs claiming and releasing overlapping topics,
    holders taking, renewing, breaking and releasing leases on a few partitions, some too late."""
    out, ts = [], 10_000
    for _ in range(count):
        ts += rng.choice((1, 500, 5_000, 31_000))
        kind = rng.random()
        if kind < 0.25:
            record = run_claim(rng.choice("abc"), *rng.sample(["o", "p", "q", "r"], rng.randint(1, 2)))
        elif kind < 0.35:
            record = {"kind": "run-release", "run": rng.choice("abc")}
        elif kind < 0.75:
            extra = {"breaks": rng.choice("xyz")} if rng.random() < 0.1 else {}
            extra.update({"target_empty": True} if rng.random() < 0.1 else {})
            record = lease(rng.choice("xyz"), scope=f"t:{rng.randint(0, 2)}", **extra)
        elif kind < 0.85:
            record = {"kind": "lease-renewal", "lease_ms": 30_000,
                      "holders": {f"t:{p}": rng.choice("xyz") for p in rng.sample(range(3), rng.randint(1, 3))}}
        else:
            record = {"kind": "lease-release", "scope": f"t:{rng.randint(0, 2)}", "holder": rng.choice("xyz")}
        out.append((ts, record))
    return out


@pytest.mark.parametrize("seed", range(20))
def test_a_reader_starting_at_a_snapshot_decides_every_later_claim_as_one_that_read_from_the_start(seed):
    """The trimmed log's promise: a snapshot taken at any offset and read back through JSON (as a new
    process reads it, the records below it deleted) leaves a reader that agrees with one that folded
    the whole history, on the state and on the outcome of every later claim."""
    rng = random.Random(seed)
    history = random_claims(rng, 300)
    cut = rng.randint(1, len(history) - 1)
    whole = Claims()
    whole.born = 10_000  # the first record's time, as a reader of offset 0 sets it
    outcomes = [whole.apply(ts, record, offset) for offset, (ts, record) in enumerate(history[:cut])]
    snapshot = json.loads(json.dumps(whole.snapshot(cut)))
    again = copy.deepcopy(whole)
    assert again.apply(history[cut - 1][0], snapshot, cut)  # in effect where it was taken for: a no-op there
    assert (again.runs, again.parts, again.born, again.leased) == (whole.runs, whole.parts, whole.born, whole.leased)
    fresh = Claims()
    assert fresh.apply(history[cut - 1][0], snapshot, cut)
    later = [(whole.apply(ts, r, cut + 1 + i), fresh.apply(ts, r, cut + 1 + i)) for i, (ts, r) in enumerate(history[cut:])]
    assert [a for a, _ in later] == [b for _, b in later]
    assert (fresh.runs, fresh.parts, fresh.born, fresh.leased) == (whole.runs, whole.parts, whole.born, whole.leased)
    every = outcomes + [a for a, _ in later]
    assert any(every) and not all(every)  # the history holds both outcomes


def test_a_snapshot_that_another_claim_came_before_is_void_for_every_reader():
    state = Claims()
    assert state.apply(1_000, lease("x"))
    stale = json.loads(json.dumps(state.snapshot(1)))
    assert state.apply(2_000, lease("y", scope="t:1"))  # landed at offset 1, before the snapshot
    assert not state.apply(3_000, stale, 2)              # taken for offset 1, found at 2: void
    assert state.parts["t:1"]["holder"] == "y"
    assert not Claims().apply(3_000, stale, 2)


def test_the_outcome_of_a_claim_a_snapshot_took_in_is_read_from_the_state():
    state = Claims()
    assert state.apply(1_000, lease("x"))
    assert state.apply(1_001, run_claim("a", "orders"))
    assert state.holds(lease("x")) and not state.holds(lease("y"))
    assert state.holds(run_claim("a", "orders")) and not state.holds(run_claim("b", "orders"))
    assert state.holds({"kind": "lease-release", "scope": "t:0", "holder": "y"})
    assert not state.holds({"kind": "lease-release", "scope": "t:0", "holder": "x"})
    assert state.holds({"kind": "run-release", "run": "b"}) and not state.holds({"kind": "run-release", "run": "a"})


def test_a_renewal_of_many_leases_renews_each_as_its_holders_lease_record_would_and_takes_none():
    """A record renewing many leases folds, scope by scope, as the lease records of their holders would
    where those hold the lease, and changes nothing elsewhere: a lease taken over, released or never
    held is not taken by a renewal. Its outcome is whether it renewed every scope."""
    def renewal(holders: dict[str, str]) -> dict:
        return {"kind": "lease-renewal", "holders": holders, "run": "r", "host": "h", "pid": 1, "lease_ms": 30_000}

    state = Claims()
    for offset, (holder, scope) in enumerate([("x", "t:0"), ("y", "t:1"), ("x", "t:2")]):
        assert state.apply(1_000, lease(holder, scope=scope), offset)
    by_records = copy.deepcopy(state)
    assert state.apply(20_000, renewal({"t:0": "x", "t:2": "x"}), 3)
    assert by_records.apply(20_000, lease("x", scope="t:0", run="r", host="h", pid=1), 3)
    assert by_records.apply(20_000, lease("x", scope="t:2", run="r", host="h", pid=1), 4)
    assert state.parts == by_records.parts
    assert state.holds(renewal({"t:0": "x", "t:2": "x"})) and not state.holds(renewal({"t:0": "x", "t:1": "x"}))
    # t:1 is y's, t:3 was never held, t:2 released: nothing taken; t:0 still renewed, the outcome False
    assert state.apply(21_000, {"kind": "lease-release", "scope": "t:2", "holder": "x"}, 5)
    assert not state.apply(40_000, renewal({"t:0": "x", "t:1": "x", "t:2": "x", "t:3": "x"}), 6)
    assert state.parts["t:0"]["ts"] == 40_000 and state.parts["t:1"]["holder"] == "y"
    assert "t:2" not in state.parts and "t:3" not in state.parts
    # a renewal does not hold off another holder once the lease ran out, as a late lease record does not
    assert state.apply(71_000, lease("z", scope="t:0"), 7)
    assert not state.apply(71_001, renewal({"t:0": "x"}), 8) and state.parts["t:0"]["holder"] == "z"


def test_the_renewals_of_a_task_of_10000_partitions_are_a_few_records_under_the_topic_size(monkeypatch):
    monkeypatch.setattr(leases, "claim_log", lambda cluster: None)
    held = [leases.PartitionLease(None, "mirror-run", f"topic{n // 100:03d}", n % 100) for n in range(10_024)]
    other = leases.PartitionLease(None, "another-run", "topic999", 0)
    records = leases.renewals([*held, other])
    assert [len(leases_of) for _, leases_of in records] == [2_000] * 5 + [24, 1]
    assert all(len(json.dumps(record, sort_keys=True)) < 300_000 for record, _ in records)
    folded = Claims()
    for offset, lease_of in enumerate([*held, other]):
        assert folded.apply(1_000, {**lease_of._base, "kind": "lease"}, offset)
    for offset, (record, leases_of) in enumerate(records, 10_025):
        assert folded.apply(2_000, json.loads(json.dumps(record)), offset)
        assert all(folded.parts[lease_of.scope]["holder"] == lease_of.holder for lease_of in leases_of)
    assert {part["ts"] for part in folded.parts.values()} == {2_000}
    assert folded.parts["topic000:0"]["run"] == "mirror-run" and folded.parts["topic999:0"]["run"] == "another-run"


def test_the_partitions_leased_are_kept_only_while_the_log_is_young():
    """`leased` serves the rule above alone: past LEASED_KEPT_MS of the log's life it is emptied at the
    next record and grows no more, so the state stops carrying every partition ever leased; a lease
    as long as that, asked then, is granted only on a target partition its claimant found empty."""
    state = Claims()
    state.born = 1_000
    lease = {"kind": "lease", "run": "b", "lease_ms": 30_000}
    assert state.apply(2_000, {**lease, "scope": "t:0", "holder": "x", "target_empty": True})
    old = 1_000 + LEASED_KEPT_MS
    assert state.leased == {"t:0"}
    assert not state.apply(old - 1, {"kind": "lease-release", "scope": "t:0", "holder": "nobody"})
    assert state.leased == {"t:0"}                      # kept up to the age, whatever the record's outcome
    assert not state.apply(old, {"kind": "lease-release", "scope": "t:0", "holder": "nobody"})
    assert state.leased == set()                        # emptied at the first record past it
    assert state.apply(old + 1, {**lease, "scope": "t:1", "holder": "y"})
    assert state.leased == set() and state.parts["t:1"]["holder"] == "y"
    assert json.loads(json.dumps(state.snapshot(9)))["leased"] == []
    long = {**lease, "lease_ms": LEASED_KEPT_MS + 60_000}
    assert state.apply(old + 2, {"kind": "lease-release", "scope": "t:0", "holder": "x"})
    assert not state.apply(old + 3, {**long, "scope": "t:0", "holder": "z"})  # leased once, no longer known
    assert state.apply(old + 4, {**long, "scope": "t:0", "holder": "z", "target_empty": True})
